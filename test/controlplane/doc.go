// Package controlplane runs a real Kubernetes control plane (etcd,
// kube-apiserver and, on request, kube-controller-manager and kube-scheduler)
// on loopback for end-to-end tests, and builds the kubelet of the same
// version for test/node, which runs a real node against it.
//
// It owns three things: building the binaries from the Go module proxy into a
// per-user cache (see Binaries), generating a throw-away PKI per control plane
// (see Start), and the lifetime of the processes it starts: every process runs
// in its own process group, is killed with SIGKILL when the test ends, and dies
// with the test binary (Pdeathsig) if the test binary itself dies.
//
// The binaries are built from two helper modules next to this package,
// kube/ (k8s.io/kubernetes) and etcd/ (go.etcd.io/etcd/server/v3). They have
// their own go.mod files so that the main module's `go test ./...` never
// descends into them, and their go.mod and go.sum files key the cache: a
// version bump rebuilds.
//
// Without a kube-controller-manager nothing publishes the kube-root-ca.crt
// ConfigMap or creates the default ServiceAccount in new namespaces, so
// CreateNamespace does both itself in that case; tests should create their
// namespaces through it.
//
// The package must never listen on anything but 127.0.0.1, and never leave a
// process or a goroutine behind once the test that started it has ended.
package controlplane
