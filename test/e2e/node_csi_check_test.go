package e2e

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/volume-agent/volume-agent/test/controlplane"
	"github.com/volume-agent/volume-agent/test/node"
)

// The snapshot API's resources (the CRDs of external-snapshotter).
var (
	volumeSnapshots        = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	volumeSnapshotContents = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
)

// applyObjects creates objs in order, finding each kind's resource through
// discovery (again after a CustomResourceDefinition, whose kinds appear
// once it is established).
func applyObjects(t *testing.T, cp *controlplane.ControlPlane, objs []*unstructured.Unstructured) {
	t.Helper()
	cfg := cp.AdminConfig()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		var gvr schema.GroupVersionResource
		waitEvery(t, time.Minute, 500*time.Millisecond, "the resource of "+gvk.String(), func() (bool, string) {
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				mapper.Reset()
				return false, err.Error()
			}
			gvr = m.Resource
			return true, ""
		})
		r := dynamic.ResourceInterface(dyn.Resource(gvr))
		if o.GetNamespace() != "" {
			r = dyn.Resource(gvr).Namespace(o.GetNamespace())
		}
		if _, err := r.Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// metricSample matches a line of the Prometheus text format: name, labels
// and value.
var metricSample = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\} (\S+)$`)

// kubeletVolumeStat reads metric (kubelet_volume_stats_used_bytes, ...)
// of claim in namespace from the kubelet's own /metrics, authenticated
// with the control plane's admin client certificate; ok is false when the
// kubelet has no such sample (yet).
func kubeletVolumeStat(t *testing.T, n *node.Node, cp *controlplane.ControlPlane, metric, namespace, claim string) (float64, bool) {
	t.Helper()
	body, err := n.KubeletGet(context.Background(), cp.AdminConfig(), "/metrics")
	if err != nil {
		t.Fatalf("the kubelet's /metrics: %v", err)
	}
	want := map[string]string{"namespace": namespace, "persistentvolumeclaim": claim}
	for _, line := range strings.Split(string(body), "\n") {
		m := metricSample.FindStringSubmatch(line)
		if m == nil || m[1] != metric || !labelsHave(m[2], want) {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("the kubelet's /metrics: %q: %v", line, err)
		}
		return v, true
	}
	return 0, false
}

// labelsHave reports whether the label list (a="x",b="y") has every label
// of want with its value.
func labelsHave(list string, want map[string]string) bool {
	found := 0
	for _, kv := range strings.Split(list, ",") {
		k, v, _ := strings.Cut(kv, "=")
		if w, ok := want[k]; ok && strconv.Quote(w) == v {
			found++
		}
	}
	return found == len(want)
}

// nodeSubvolumes lists the subvolumes of the btrfs mounted on root in the
// node, by path, and its qgroups but the top level's (0/5).
func nodeSubvolumes(t *testing.T, n *node.Node, root string) (subs, qgroups []string) {
	t.Helper()
	out, err := n.Command("btrfs", "subvolume", "list", "-o", root).CombinedOutput()
	if err != nil {
		t.Fatalf("btrfs subvolume list %s: %v: %s", root, err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			subs = append(subs, f[len(f)-1])
		}
	}
	out, err = n.Command("btrfs", "qgroup", "show", "--raw", root).CombinedOutput()
	if err != nil {
		t.Fatalf("btrfs qgroup show %s: %v: %s", root, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(f[0], "/") && f[0] != "0/5" && f[0] != "Qgroupid" {
			qgroups = append(qgroups, f[0])
		}
	}
	return subs, qgroups
}
