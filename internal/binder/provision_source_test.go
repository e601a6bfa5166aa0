package binder

import (
	"errors"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// provInner is an inner source with class "fast" of testProvisioner (Delete
// unless classOpts say otherwise), claim "data" (u1) of that class, and pod
// "web" using it.
func provInner(classOpts ...func(*storagev1.StorageClass)) *fakeInner {
	inner := newFakeInner()
	inner.scs = append(inner.scs, newClass("fast", classOpts...))
	inner.claims = []*v1.PersistentVolumeClaim{newClaim("data", "1Gi", claimUID("u1"), claimClass("fast"))}
	inner.pods = []*v1.Pod{podUsing("web", "data")}
	return inner
}

// fastRetry makes failed operations retried after 20 ms.
func fastRetry(b *Source) { b.ops.retryMin = 20 * time.Millisecond }

// A claim that no PersistentVolume fits is provisioned; the PersistentVolume
// is on disk before any view shows it, and the views show it Bound.
func TestProvisionsAClaim(t *testing.T) {
	prov := &fakeProvisioner{}
	h := startWith(t, provInner(), statePath(t), []provisioner.Provisioner{prov})
	h.expect("bound to the provisioned PV", func() bool {
		if !h.boundTo("data", "pvc-u1")() {
			return false
		}
		recs, err := newStore(h.path).load() // shown: must be on disk already
		if err != nil || recs.provisioned("pvc-u1") == nil {
			t.Fatalf("the view shows pvc-u1 but the state file has %v, %v", recs, err)
		}
		return true
	})
	pv := h.pv("pvc-u1")
	if ref := pv.Spec.ClaimRef; ref == nil || ref.Name != "data" || ref.UID != "u1" || pv.Status.Phase != v1.VolumeBound ||
		pv.Spec.Local == nil || pv.Spec.Local.Path != "/var/lib/volumes/pvc-u1" || pv.Spec.StorageClassName != "fast" ||
		pv.Annotations[provisioner.AnnProvisionedBy] != testProvisioner {
		t.Errorf("provisioned PV view %+v", pv)
	}
	if c := h.claim("data"); c.Status.Capacity.Storage().String() != "1Gi" {
		t.Errorf("claim status %+v; want the provisioned PV's capacity", c.Status)
	}
	if pvs := h.b.PersistentVolumes(); len(pvs) != 1 || pvs[0].Name != "pvc-u1" || pvs[0].Status.Phase != v1.VolumeBound {
		t.Errorf("PersistentVolumes() = %v", pvs)
	}
	if cs := h.claimStatus("data"); !slices.Equal(cs, []ClaimStatus{{Namespace: "default", Name: "data", Phase: PhaseBound, PV: "pvc-u1", Capacity: "1Gi", ReclaimPolicy: "Delete"}}) {
		t.Errorf("Claims() = %+v", cs)
	}
	prov.mu.Lock()
	req := prov.requests[0]
	prov.mu.Unlock()
	if req.PVName != "pvc-u1" || req.SelectedNode != "node-1" || req.Class.Name != "fast" || req.Claim.Name != "data" {
		t.Errorf("request %+v", req)
	}
	if made, _ := prov.calls(); len(made) != 1 {
		t.Errorf("Provision called for %v, want once", made)
	}
	if h.logs.FilterMessage("claim bound to a provisioned PersistentVolume").Len() != 1 {
		t.Errorf("provisioning not logged")
	}
}

// A provisioned PersistentVolume whose record cannot be written is not
// shown; once the write succeeds it is, without provisioning again.
func TestProvisionedPVIsNotShownUntilRecorded(t *testing.T) {
	var full atomic.Bool
	full.Store(true)
	prov := &fakeProvisioner{}
	h := startWith(t, provInner(), statePath(t), []provisioner.Provisioner{prov}, func(b *Source) {
		b.retryMin = 50 * time.Millisecond
		b.store.write = func(path string, data []byte) error {
			if full.Load() {
				return &os.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
			}
			return writeFileAtomic(path, data)
		}
	})
	h.expect("not recorded", func() bool { return strings.Contains(h.claimStatus("data")[0].Error, "not recorded") })
	if c := h.claim("data"); c.Status.Phase != v1.ClaimPending {
		t.Errorf("claim %s while its PV is not on disk", c.Status.Phase)
	}
	if _, err := h.b.Objects().PersistentVolume("pvc-u1"); !errors.Is(err, volume.ErrNotFound) {
		t.Errorf("the unrecorded PV is shown: %v", err)
	}
	if len(h.b.PersistentVolumes()) != 0 {
		t.Errorf("PersistentVolumes() shows the unrecorded PV")
	}
	full.Store(false)
	h.expect("bound once recorded", h.boundTo("data", "pvc-u1"))
	if made, _ := prov.calls(); len(made) != 1 {
		t.Errorf("Provision called for %v, want once: the result waits for the write", made)
	}
}

// A binder started again on the same state file keeps the provisioned
// PersistentVolume, before the inner source syncs and after, and never
// provisions it again.
func TestProvisionedPVSurvivesRestart(t *testing.T) {
	path := statePath(t)
	h := startWith(t, provInner(), path, []provisioner.Provisioner{&fakeProvisioner{}})
	h.expect("bound", h.boundTo("data", "pvc-u1"))
	h.stop()

	inner := provInner()
	inner.synced = false
	prov := &fakeProvisioner{}
	h = startWith(t, inner, path, []provisioner.Provisioner{prov})
	if !h.boundTo("data", "pvc-u1")() || h.pv("pvc-u1").Spec.Local == nil {
		t.Errorf("after a restart, before sync: claim %+v; want Bound to pvc-u1 from the state file", h.claim("data"))
	}
	h.update(func(f *fakeInner) { f.synced = true }, "synced", h.synced)
	if !h.boundTo("data", "pvc-u1")() {
		t.Errorf("after a restart, once synced: claim %+v", h.claim("data"))
	}
	if made, _ := prov.calls(); len(made) != 0 {
		t.Errorf("provisioned again after a restart: %v", made)
	}
}

// A failed Provision keeps the claim Pending with the error, is retried
// with backoff, and holds up no other claim.
func TestProvisionErrorIsRetried(t *testing.T) {
	prov := &fakeProvisioner{}
	prov.fail(errDiskFull, nil)
	inner := provInner()
	inner.pvs = []*v1.PersistentVolume{newPV("pv-a", "1Gi")}
	inner.claims = append(inner.claims, newClaim("other", "1Gi"))
	inner.pods = append(inner.pods, podUsing("api", "other"))
	h := startWith(t, inner, statePath(t), []provisioner.Provisioner{prov}, fastRetry)
	h.expect("the error as the reason", func() bool {
		return strings.Contains(h.claimStatus("data")[0].Error, "failed, retrying: provision PersistentVolume \"pvc-u1\" for claim default/data with test.io/fake: no space left on device")
	})
	if !h.boundTo("other", "pv-a")() {
		t.Errorf("claim other is held up: %+v", h.claimStatus("other"))
	}
	h.eventually("retried", func() bool { made, _ := prov.calls(); return len(made) >= 3 })
	prov.fail(nil, nil)
	h.expect("bound once it succeeds", h.boundTo("data", "pvc-u1"))
	if cs := h.claimStatus("data"); cs[0].Error != "" {
		t.Errorf("Claims() once bound = %+v", cs)
	}
	failed := h.logs.FilterMessage("storage operation failed").All()
	if len(failed) < 2 {
		t.Errorf("failures not logged")
	}
	for i, e := range failed {
		level := zapcore.DebugLevel // the same failure again
		if i == 0 {
			level = zapcore.WarnLevel
		}
		if e.Level != level || e.ContextMap()["pv"] == nil || e.ContextMap()["error"] == nil {
			t.Errorf("failure %d logged at %s with %v, want %s with the pv and the error", i, e.Level, e.ContextMap(), level)
		}
	}
}

// A released provisioned PersistentVolume with reclaim policy Delete is
// deleted once no pod names its claim, and its record dropped after.
func TestReleasedProvisionedPVIsDeleted(t *testing.T) {
	prov := &fakeProvisioner{}
	h := startWith(t, provInner(), statePath(t), []provisioner.Provisioner{prov})
	h.expect("bound", h.boundTo("data", "pvc-u1"))

	h.update(func(f *fakeInner) { f.claims = nil }, "held while a pod names the claim", func() bool {
		cs := h.claimStatus("data")
		return len(cs) == 1 && strings.Contains(cs[0].Error, "a pod that is not terminated still names it")
	})
	// Another pass, and time for a Delete that should not run to show.
	h.update(func(f *fakeInner) { f.pvs = []*v1.PersistentVolume{newPV("pv-x", "1Gi")} }, "another pass", func() bool {
		_, err := h.b.Objects().PersistentVolume("pv-x")
		return err == nil
	})
	time.Sleep(50 * time.Millisecond)
	if _, deleted := prov.calls(); len(deleted) != 0 || h.pv("pvc-u1").Status.Phase != v1.VolumeBound {
		t.Errorf("released or deleted while pod web still names the claim: %v", deleted)
	}
	h.update(func(f *fakeInner) { f.pods = nil }, "deleted and dropped", func() bool { return len(h.b.Claims()) == 0 })
	if _, deleted := prov.calls(); !slices.Equal(deleted, []string{"pvc-u1"}) || !slices.Equal(prov.moved(), []string{"pvc-u1"}) {
		t.Errorf("Delete called for %v, MoveAside for %v; want pvc-u1 once each", deleted, prov.moved())
	}
	assertRecords(t, h.path, records{})
	if _, err := h.b.Objects().PersistentVolume("pvc-u1"); !errors.Is(err, volume.ErrNotFound) {
		t.Errorf("deleted PV still shown: %v", err)
	}
}

// A failed Delete keeps the record, is retried, and the record is dropped
// only once a Delete succeeded.
func TestDeleteFailureKeepsTheRecord(t *testing.T) {
	prov := &fakeProvisioner{}
	h := startWith(t, provInner(), statePath(t), []provisioner.Provisioner{prov}, fastRetry)
	h.expect("bound", h.boundTo("data", "pvc-u1"))
	prov.fail(nil, errors.New("device busy"))
	h.inner.update(func(f *fakeInner) { f.claims, f.pods = nil, []*v1.Pod{podUsing("other")} })
	h.eventually("Delete retried", func() bool { _, deleted := prov.calls(); return len(deleted) >= 3 })
	recs, err := newStore(h.path).load()
	if err != nil || recs["pvc-u1"].Phase != PhaseReleased || recs.provisioned("pvc-u1") == nil {
		t.Fatalf("state file while Delete fails: %v, %v; want pvc-u1 Released and provisioned", recs, err)
	}
	if h.pv("pvc-u1").Status.Phase != v1.VolumeReleased {
		t.Errorf("pvc-u1 not shown Released while its Delete fails")
	}
	prov.fail(nil, nil)
	h.expect("dropped once deleted", func() bool { return len(h.b.Claims()) == 0 })
	assertRecords(t, h.path, records{})
}

// Retain keeps the record and the storage; the claim back with its UID
// gets the same PersistentVolume.
func TestRetainedProvisionedPVIsKept(t *testing.T) {
	prov := &fakeProvisioner{}
	h := startWith(t, provInner(classRetain), statePath(t), []provisioner.Provisioner{prov})
	h.expect("bound", h.boundTo("data", "pvc-u1"))
	claims := h.inner.PersistentVolumeClaims()
	h.update(func(f *fakeInner) { f.claims, f.pods = nil, []*v1.Pod{podUsing("other")} }, "released", func() bool {
		return h.pv("pvc-u1").Status.Phase == v1.VolumeReleased
	})
	h.update(func(f *fakeInner) { f.claims, f.pods = claims, []*v1.Pod{podUsing("web", "data")} }, "bound again", h.boundTo("data", "pvc-u1"))
	made, deleted := prov.calls()
	if len(made) != 1 || len(deleted) != 0 {
		t.Errorf("Provision for %v, Delete for %v; want one Provision and no Delete", made, deleted)
	}
}

// A provisioning is recorded before the provisioner is called. After a
// crash that cut it short (or came before its result was recorded), with
// its claim removed meanwhile, it is made again at start, recorded
// Released, and its storage deleted: nothing is left behind unknown.
func TestProvisioningCutShortIsFinishedAndReclaimed(t *testing.T) {
	path := statePath(t)
	inner := provInner()
	claim, class := inner.claims[0], inner.scs[0]
	if err := newStore(path).save(records{"pvc-u1": {Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: phaseProvisioning,
		Provisioning: &provisionIntent{Provisioner: testProvisioner, Claim: claim, Class: class}}}); err != nil {
		t.Fatal(err)
	}
	inner.claims, inner.pods = nil, nil // removed while the agent was down
	block := make(chan struct{})
	prov := &fakeProvisioner{block: block}
	h := startWith(t, inner, path, []provisioner.Provisioner{prov}, withDelay(0))
	h.eventually("the claim shown Pending while its provisioning runs", func() bool {
		cs := h.claimStatus("data")
		return len(cs) == 1 && cs[0].Phase == PhasePending && cs[0].PV == "pvc-u1" &&
			strings.Contains(cs[0].Error, `removed from the manifests while PersistentVolume "pvc-u1" was being provisioned`)
	})
	close(block)
	h.eventually("the storage provisioned again, then deleted", func() bool {
		made, deleted := prov.calls()
		return slices.Equal(made, []string{"pvc-u1"}) && slices.Equal(deleted, []string{"pvc-u1"})
	})
	h.eventually("the record dropped", func() bool { return len(h.b.current().recs) == 0 })
	if h.logs.FilterMessage("provisioned PersistentVolume released: its claim left while it was provisioned").Len() != 1 {
		t.Errorf("the release of the storage made for a removed claim is not logged")
	}
}

// A provisioning recorded while the state file cannot be written is not
// begun: the provisioner is called once it is on disk.
func TestProvisioningNotBegunUntilRecorded(t *testing.T) {
	var full atomic.Bool
	full.Store(true)
	prov := &fakeProvisioner{}
	h := startWith(t, provInner(), statePath(t), []provisioner.Provisioner{prov}, func(b *Source) {
		b.retryMin = 50 * time.Millisecond
		b.store.write = func(path string, data []byte) error {
			if full.Load() {
				return &os.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
			}
			return writeFileAtomic(path, data)
		}
	})
	h.expect("not recorded", func() bool {
		return strings.Contains(h.claimStatus("data")[0].Error, `provisioning of PersistentVolume "pvc-u1" not recorded, so not begun`)
	})
	time.Sleep(100 * time.Millisecond)
	if made, _ := prov.calls(); len(made) != 0 {
		t.Errorf("Provision called for %v before the provisioning was recorded", made)
	}
	full.Store(false)
	h.expect("bound once recorded", h.boundTo("data", "pvc-u1"))
}
