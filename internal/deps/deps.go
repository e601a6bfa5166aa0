// Package deps pins the module's dependencies while the packages that use
// them are being written. Delete it once every import below is used elsewhere.
package deps

import (
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/moby/sys/mountinfo"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "go.uber.org/goleak"
	_ "go.uber.org/zap"
	_ "golang.org/x/sync/errgroup"
	_ "golang.org/x/sys/unix"
	_ "k8s.io/apimachinery/pkg/util/yaml"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/kubernetes/scheme"
	_ "k8s.io/client-go/tools/cache"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/klog/v2"
	_ "k8s.io/mount-utils"
	_ "k8s.io/utils/clock"
	_ "sigs.k8s.io/yaml"
)
