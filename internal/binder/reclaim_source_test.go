package binder

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/reclaim"
)

func withDelay(d time.Duration) func(*Source) { return func(b *Source) { b.delay = d } }

// keepAlive is a pod without claims: it keeps the source from looking
// emptied when a test removes its claims and their pods.
var keepAlive = []*v1.Pod{podUsing("other")}

// A claim file rewritten with `rm; cp` is missing for less than the settle
// time: nothing is released.
func TestClaimBackWithinTheSettleTimeIsNotReleased(t *testing.T) {
	prov := &fakeProvisioner{}
	h := startWith(t, provInner(), statePath(t), []provisioner.Provisioner{prov}, func(b *Source) { b.settle = 300 * time.Millisecond })
	h.expect("bound", h.boundTo("data", "pvc-u1"))
	claims, pods := h.inner.PersistentVolumeClaims(), h.inner.Pods()
	h.update(func(f *fakeInner) { f.claims, f.pods = nil, keepAlive }, "held", func() bool {
		cs := h.claimStatus("data")
		return len(cs) == 1 && strings.Contains(cs[0].Error, "it counts once that has held for 300ms")
	})
	time.Sleep(100 * time.Millisecond)
	h.update(func(f *fakeInner) { f.claims, f.pods = claims, pods }, "still bound", h.boundTo("data", "pvc-u1"))
	time.Sleep(400 * time.Millisecond)
	if n := h.logs.FilterMessage("claim released").Len(); n != 0 || len(prov.moved()) != 0 {
		t.Errorf("released %d times, moved aside %v; want neither", n, prov.moved())
	}
}

// A claim missing when the agent starts is released only on the source's
// evidence: never while the source lists nothing, and once it has listed
// objects for the settle time.
func TestClaimMissingAtStartIsReleasedOnlyOnEvidence(t *testing.T) {
	path := statePath(t)
	prov := &fakeProvisioner{}
	h := startWith(t, provInner(), path, []provisioner.Provisioner{prov})
	h.expect("bound", h.boundTo("data", "pvc-u1"))
	h.stop()

	inner := provInner()
	inner.claims, inner.pods, inner.scs = nil, nil, nil
	h = startWith(t, inner, path, []provisioner.Provisioner{prov})
	h.expect("held", func() bool {
		cs := h.claimStatus("data")
		return len(cs) == 1 && cs[0].Phase == PhaseBound && strings.Contains(cs[0].Error, "has listed nothing since")
	})
	time.Sleep(10 * testSettle)
	h.inner.update(func(f *fakeInner) {}) // another pass
	time.Sleep(10 * testSettle)
	if recs, _ := newStore(path).load(); recs["pvc-u1"].Phase != PhaseBound || len(prov.moved()) != 0 {
		t.Errorf("records %v, moved aside %v; want still Bound, nothing moved", recs, prov.moved())
	}
	// The source lists something: released, once that has held.
	h.update(func(f *fakeInner) { f.pods = keepAlive }, "released and deleted", func() bool { return len(h.b.Claims()) == 0 })
}

// A source that lists nothing at all (a directory replaced or not mounted)
// releases nothing, however long it stays so.
func TestEmptiedSourceReleasesNothing(t *testing.T) {
	prov := &fakeProvisioner{}
	h := startWith(t, provInner(), statePath(t), []provisioner.Provisioner{prov})
	h.expect("bound", h.boundTo("data", "pvc-u1"))
	h.update(func(f *fakeInner) { f.claims, f.pods, f.scs = nil, nil, nil }, "held", func() bool {
		cs := h.claimStatus("data")
		return len(cs) == 1 && strings.Contains(cs[0].Error, "emptied directory never releases")
	})
	time.Sleep(10 * testSettle)
	h.inner.update(func(f *fakeInner) {})
	time.Sleep(10 * testSettle)
	if n := h.logs.FilterMessage("claim released").Len(); n != 0 || len(prov.moved()) != 0 {
		t.Errorf("released %d times, moved aside %v; want neither", n, prov.moved())
	}
	// Refilled without the claim: its removal counts from then.
	h.update(func(f *fakeInner) { f.pods = keepAlive }, "released and deleted", func() bool { return len(h.b.Claims()) == 0 })
}

// Released storage stays aside for the reclaim delay; the claim back within
// it gets the same storage, restored, and nothing is deleted.
func TestReleasedStorageIsRestoredWhenTheClaimIsBack(t *testing.T) {
	prov := &fakeProvisioner{}
	path := statePath(t)
	h := startWith(t, provInner(), path, []provisioner.Provisioner{prov}, withDelay(time.Hour))
	h.expect("bound", h.boundTo("data", "pvc-u1"))
	claims, pods := h.inner.PersistentVolumeClaims(), h.inner.Pods()
	start := time.Now()
	h.update(func(f *fakeInner) { f.claims, f.pods = nil, keepAlive }, "aside", func() bool {
		cs := h.claimStatus("data")
		return len(cs) == 1 && cs[0].PendingDeletion != nil && cs[0].PendingDeletion.Step == "Aside"
	})
	cs := h.claimStatus("data")[0]
	if at := *cs.PendingDeletion.DeleteAfter; at.Before(start.Add(time.Hour-time.Second)) || at.After(time.Now().Add(time.Hour+time.Second)) {
		t.Errorf("deleteAfter %v, want an hour from the release", at)
	}
	recs, err := newStore(path).load()
	if r := recs["pvc-u1"]; err != nil || r.Reclaim.Step != reclaim.Aside {
		t.Fatalf("state file: %v, %v; want pvc-u1 Aside, recorded", recs, err)
	}
	h.eventually("moved aside", func() bool { return len(prov.moved()) == 1 })
	h.update(func(f *fakeInner) { f.claims, f.pods = claims, pods }, "bound again", h.boundTo("data", "pvc-u1"))
	made, deleted := prov.calls()
	prov.mu.Lock()
	restores := len(prov.restores)
	prov.mu.Unlock()
	if len(made) != 1 || len(deleted) != 0 || restores != 1 {
		t.Errorf("Provision %v, Delete %v, %d Restore; want one Provision, one Restore, no Delete", made, deleted, restores)
	}
	want := records{"pvc-u1": {Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: PhaseBound,
		Provisioned: recs["pvc-u1"].Provisioned}}
	if got, err := newStore(path).load(); err != nil || !equalRecords(got, want) {
		t.Errorf("state file %v, %v; want %v", got, err, want)
	}
}

// Deletion begun is recorded, survives a restart, and is finished: the
// claim back is never bound to that storage again.
func TestDeletionBegunIsFinishedAfterARestart(t *testing.T) {
	prov := &fakeProvisioner{}
	path := statePath(t)
	h := startWith(t, provInner(), path, []provisioner.Provisioner{prov}, fastRetry)
	h.expect("bound", h.boundTo("data", "pvc-u1"))
	claims, pods := h.inner.PersistentVolumeClaims(), h.inner.Pods()
	prov.fail(nil, errPartlyDeleted)
	h.inner.update(func(f *fakeInner) { f.claims, f.pods = nil, keepAlive })
	h.eventually("deletion failing", func() bool { _, deleted := prov.calls(); return len(deleted) >= 1 })
	h.stop()
	if recs, _ := newStore(path).load(); recs["pvc-u1"].Reclaim.Step != reclaim.Deleting {
		t.Fatalf("records %v; want pvc-u1 Deleting, recorded", recs)
	}

	inner := provInner()
	inner.claims, inner.pods = claims, pods // the claim is back
	h = startWith(t, inner, path, []provisioner.Provisioner{prov}, fastRetry)
	h.expect("waits for the deletion", func() bool {
		return strings.Contains(h.claimStatus("data")[0].Error, "is being deleted")
	})
	prov.fail(nil, nil)
	h.expect("provisioned again once deleted", h.boundTo("data", "pvc-u1"))
	prov.mu.Lock()
	restores := len(prov.restores)
	prov.mu.Unlock()
	if made, _ := prov.calls(); len(made) != 2 || restores != 0 {
		t.Errorf("Provision %v, %d Restore; want a second Provision and no Restore", made, restores)
	}
}

// Nothing is released, moved or deleted while the PersistentVolume is set
// up for a pod; the teardown (NotifyActual) lets it go on at once.
func TestNothingIsReclaimedWhileInUse(t *testing.T) {
	prov := &fakeProvisioner{}
	var busy atomic.Bool
	busy.Store(true)
	h := startWith(t, provInner(), statePath(t), []provisioner.Provisioner{prov},
		func(b *Source) { b.inUse = func(pv string) bool { return pv == "pvc-u1" && busy.Load() } })
	h.expect("bound", h.boundTo("data", "pvc-u1"))
	h.update(func(f *fakeInner) { f.claims, f.pods = nil, keepAlive }, "held", func() bool {
		cs := h.claimStatus("data")
		return len(cs) == 1 && strings.Contains(cs[0].Error, "still set up for a pod on this node")
	})
	time.Sleep(10 * testSettle)
	if len(prov.moved()) != 0 {
		t.Fatalf("moved aside while in use: %v", prov.moved())
	}
	busy.Store(false)
	h.b.NotifyActual()
	h.expect("deleted", func() bool { return len(h.b.Claims()) == 0 })
}
