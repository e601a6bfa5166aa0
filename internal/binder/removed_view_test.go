package binder

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// A claim removed from the manifests while a pod names it is still bound in
// the views, as a cluster's pvc-protection keeps a claim being deleted:
// its volume name, its UID, and the condition volume.ClaimRemoved with the
// words Claims() shows for it, so that the pod's volume says the same. Once
// released, it is gone from the views.
func TestRemovedClaimHeldInTheView(t *testing.T) {
	h := startWith(t, provInner(), statePath(t), []provisioner.Provisioner{&fakeProvisioner{}})
	h.expect("bound", h.boundTo("data", "pvc-u1"))
	h.update(func(f *fakeInner) { f.claims = nil }, "held while a pod names the claim", func() bool {
		cs := h.claimStatus("data")
		return len(cs) == 1 && cs[0].Error == "removed from the manifests but not released: a pod that is not terminated still names it"
	})
	view, err := h.b.Objects().PersistentVolumeClaim("default", "data")
	if err != nil {
		t.Fatal(err)
	}
	c := view.Status.Conditions
	if view.Spec.VolumeName != "pvc-u1" || view.UID != "u1" || view.Status.Phase != v1.ClaimBound ||
		len(c) != 1 || c[0].Type != volume.ClaimRemoved || c[0].Message != h.claimStatus("data")[0].Error {
		t.Fatalf("view = %+v; want bound to pvc-u1 with the condition %s saying what Claims() says", view, volume.ClaimRemoved)
	}
	h.update(func(f *fakeInner) { f.pods = nil }, "released", func() bool {
		_, err := h.b.Objects().PersistentVolumeClaim("default", "data")
		return errors.Is(err, volume.ErrNotFound)
	})
}
