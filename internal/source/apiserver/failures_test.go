package apiserver

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// denyList makes every list of resource fail with 403.
func (h *harness) denyList(resource string) { h.deny("list", resource) }

// deny makes the fake API server refuse verb on resource.
func (h *harness) deny(verb, resource string) {
	h.client.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", errors.New("RBAC: access denied"))
	})
}

// TestUnknownNodeKeepsUnsynced: a wrong --node-name lists no pods; without
// the Node object the source must not claim to know the node's pods.
func TestUnknownNodeKeepsUnsynced(t *testing.T) {
	h := newBareHarness(t, testPod("ns", "app", "node-1"))
	h.run()
	h.eventually("reason names the node", func() (bool, string) {
		st := h.src.Status()
		return !st.Synced && strings.Contains(st.Reason, `node "node-1" not found`), st.Reason
	})
	h.create(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	h.eventually("synced once the node exists", func() (bool, string) { return h.src.Status().Synced, h.src.Status().Reason })
}

// TestEmptyFirstListNotifies: a node with no pods sends no pod event; the
// source still says once that it synced.
func TestEmptyFirstListNotifies(t *testing.T) {
	h := newHarness(t)
	h.run()
	h.eventually("OnChange after the first list", func() (bool, string) {
		return h.src.Status().Synced && h.changes.Load() > 0, fmt.Sprintf("%d changes", h.changes.Load())
	})
}

// TestDeniedPodWatchIsReported: a 403 on the pod list shows in /readyz
// (the reason the source is not synced) and /v1/sources (Errors), not only
// in the log; it is an answer, not an unreachable API server.
func TestDeniedPodWatchIsReported(t *testing.T) {
	h := newHarness(t)
	h.denyList("pods")
	h.run()
	h.eventually("forbidden reported", func() (bool, string) {
		st := h.src.Status()
		return strings.HasPrefix(st.Reason, `cannot list the pods bound to node "node-1": `) && strings.Contains(st.Reason, "forbidden") &&
				st.Disconnected == "" && len(st.Errors) > 0 && strings.HasPrefix(st.Errors[0], "pods:"),
			fmt.Sprintf("%+v", st)
	})
}

// TestDeniedNodeWatchIsTheReason: a 403 on the Node list is why the source
// is not synced, rather than pods "not yet listed".
func TestDeniedNodeWatchIsTheReason(t *testing.T) {
	h := newHarness(t)
	h.denyList("nodes")
	h.run()
	h.eventually("forbidden node list is the reason", func() (bool, string) {
		st := h.src.Status()
		return !st.Synced && strings.HasPrefix(st.Reason, `cannot list node "node-1": `) && strings.Contains(st.Reason, "forbidden") &&
			st.Disconnected == "", fmt.Sprintf("%+v", st)
	})
}

// TestDeniedObjectFailsInsteadOfWaiting: a ConfigMap the agent may not
// read is an error to report, not an input to wait for.
func TestDeniedObjectFailsInsteadOfWaiting(t *testing.T) {
	h := newHarness(t, testPod("ns", "app", "node-1", cmVolume("cm")))
	h.denyList("configmaps")
	h.synced()
	h.eventually("lookup says forbidden", func() (bool, string) {
		_, err := h.src.Objects().ConfigMap("ns", "cm")
		return err != nil && !errors.Is(err, volume.ErrNotReady) && apierrors.IsForbidden(errors.Unwrap(err)), fmt.Sprint(err)
	})
	if errs := h.src.Status().Errors; len(errs) == 0 || !strings.Contains(strings.Join(errs, "\n"), "configmaps ns/cm") {
		t.Errorf("Status().Errors = %q, want the configMap watch error", errs)
	}
}

// TestTerminatedPodsAreNotWatchedFor: a Succeeded pod's objects are not watched.
func TestTerminatedPodsAreNotWatchedFor(t *testing.T) {
	done := testPod("ns", "job", "node-1", cmVolume("cm"))
	done.Status.Phase = v1.PodSucceeded
	h := newHarness(t, done)
	h.synced()
	if open, _ := h.watchesOf("configmaps", "ns", "metadata.name=cm"); open != 0 {
		t.Errorf("%d watches of a finished pod's configMap, want 0", open)
	}
}

// TestPersistentVolumeInformersStartOnFirstUse: nothing lists every PV and
// PVC of the cluster until a lookup needs them.
func TestPersistentVolumeInformersStartOnFirstUse(t *testing.T) {
	h := newHarness(t)
	h.synced()
	if h.listed("persistentvolumes", "") || h.listed("persistentvolumeclaims", "") {
		t.Fatal("PVs or PVCs listed before any lookup")
	}
	h.eventually("PV lookup lists PVs", func() (bool, string) {
		_, err := h.src.PersistentVolume("pv")
		return errors.Is(err, volume.ErrNotFound), fmt.Sprint(err)
	})
}
