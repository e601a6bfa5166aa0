package binder

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/source/volumesnapshot"
)

// snapWorld fills inner with a local class "fast", claim "data" (uid u1,
// 1Gi) used by pod "web", and the VolumeSnapshots given.
func snapWorld(inner *fakeInner, snaps ...*volumesnapshot.VolumeSnapshot) {
	inner.scs = []*storagev1.StorageClass{localClass("fast")}
	inner.claims = []*v1.PersistentVolumeClaim{newClaim("data", "1Gi", claimUID("u1"), claimClass("fast"))}
	inner.pods = []*v1.Pod{podUsing("web", "data")}
	inner.snaps = snaps
}

// startSnap runs a binder with p as its local provisioner and snapshotter.
func startSnap(t *testing.T, inner *fakeInner, path string, p *fakeLocal, tweak ...func(*Source)) *harness {
	t.Helper()
	return startWith(t, inner, path, []provisioner.Provisioner{p}, append([]func(*Source){withSnapshotter(p)}, tweak...)...)
}

// loadSnaps reads the snapshot records of the state file.
func loadSnaps(t *testing.T, path string) snapRecords {
	t.Helper()
	_, _, snaps, err := newStore(path).loadAll()
	if err != nil {
		t.Fatal(err)
	}
	return snaps
}

// A VolumeSnapshot of a claim is taken once the claim is Bound to a
// volume the local provisioner made, recorded, and shown ready to use
// with its claim, PersistentVolume and size.
func TestSnapshotTakenOfBoundClaim(t *testing.T) {
	inner := newFakeInner()
	snapWorld(inner, newSnapshot("snap", "s1", "data"))
	path := filepath.Join(t.TempDir(), "claims.json")
	p := newFakeLocal()
	h := startSnap(t, inner, path, p)
	h.expect("snapshot ready", h.readySnapshot("snap", "1Gi"))
	takes, _, exist := p.snapCalls()
	if len(takes) != 1 || exist[takes[0]] != "pvc-u1" {
		t.Fatalf("TakeSnapshot calls %v, snapshots %v; want one, of pvc-u1", takes, exist)
	}
	s := h.snapshotNamed("snap")[0]
	if s.Claim != "data" || s.PV != "pvc-u1" || s.Snapshot != takes[0] || s.UID != "s1" || s.CreationTime == nil || s.Removed {
		t.Errorf("snapshot shown %+v", s)
	}
	r, ok := loadSnaps(t, path)[takes[0]]
	if !ok || r.Step != snapReady || r.Size != "1Gi" || r.UID != "s1" || r.ClaimUID != "u1" || r.PV.Name != "pvc-u1" {
		t.Errorf("record %+v (found %t); want Ready, 1Gi, of claim uid u1 and pvc-u1", r, ok)
	}
}

// What a VolumeSnapshot waits for, or why it is refused, as shown.
func TestSnapshotWaitsOrIsRefused(t *testing.T) {
	other := "other"
	tests := []struct {
		name   string
		change func(f *fakeInner)
		want   string
	}{
		{"its claim missing", func(f *fakeInner) { f.snaps = []*volumesnapshot.VolumeSnapshot{newSnapshot("snap", "s1", "nope")} },
			"waiting for claim default/nope, which spec.source.persistentVolumeClaimName names, to exist"},
		{"its claim not used, so not bound", func(f *fakeInner) { f.pods = nil },
			"waiting for claim default/data to be bound (a claim is provisioned once a pod uses it)"},
		{"its class missing", func(f *fakeInner) { f.snaps[0].Spec.VolumeSnapshotClassName = &other },
			`waiting for VolumeSnapshotClass "other", which spec.volumeSnapshotClassName names, to exist`},
		{"its class of another driver", func(f *fakeInner) {
			f.snaps[0].Spec.VolumeSnapshotClassName = &other
			f.vscs = []*volumesnapshot.VolumeSnapshotClass{{Driver: "other.example.com", DeletionPolicy: "Delete"}}
			f.vscs[0].Name = "other"
		}, `VolumeSnapshotClass "other" names driver "other.example.com": the agent takes snapshots only for "local.volume-agent.io"`},
		{"its claim a raw block volume", func(f *fakeInner) {
			block := v1.PersistentVolumeBlock
			f.claims[0].Spec.VolumeMode = &block
		}, `claim default/data is bound to PersistentVolume "pvc-u1", a raw block volume: snapshots and clones of raw block volumes are not supported`},
		{"its claim bound to a PersistentVolume of the manifests", func(f *fakeInner) {
			f.claims[0].Spec.StorageClassName = nil
			f.pvs = []*v1.PersistentVolume{newPV("pv-a", "1Gi")}
		}, `claim default/data is bound to PersistentVolume "pv-a", which the agent's local provisioner did not make: only its volumes can be snapshotted`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inner := newFakeInner()
			snapWorld(inner, newSnapshot("snap", "s1", "data"))
			tt.change(inner)
			p := newFakeLocal()
			h := startSnap(t, inner, filepath.Join(t.TempDir(), "claims.json"), p)
			h.expect("the reason shown", func() bool {
				s := h.snapshotNamed(inner.snaps[0].Name)
				return len(s) == 1 && strings.Contains(s[0].Error, tt.want) && !s[0].ReadyToUse
			})
			if takes, _, _ := p.snapCalls(); len(takes) != 0 {
				t.Errorf("TakeSnapshot called: %v", takes)
			}
		})
	}
}

// A snapshot whose VolumeSnapshot is removed is kept for the reclaim
// delay (shown with when it is deleted), kept when it comes back, and
// deleted once the delay has passed.
func TestSnapshotRemovedIsDeletedAfterTheReclaimDelay(t *testing.T) {
	inner := newFakeInner()
	snapWorld(inner, newSnapshot("snap", "s1", "data"))
	path := filepath.Join(t.TempDir(), "claims.json")
	p := newFakeLocal()
	h := startSnap(t, inner, path, p, withDelay(time.Hour))
	h.expect("snapshot ready", h.readySnapshot("snap", "1Gi"))
	removedAt := time.Now()
	h.update(func(f *fakeInner) { f.snaps = nil }, "snapshot removed, kept", func() bool {
		s := h.snapshotNamed("snap")
		return len(s) == 1 && s[0].Removed && s[0].DeleteAfter != nil
	})
	s := h.snapshotNamed("snap")[0]
	if s.DeleteAfter.Before(removedAt.Add(59*time.Minute)) || !s.ReadyToUse || s.Deleting {
		t.Errorf("removed snapshot shown %+v; want ready, deleted after an hour", s)
	}
	h.update(func(f *fakeInner) { f.snaps = []*volumesnapshot.VolumeSnapshot{newSnapshot("snap", "s1", "data")} }, "snapshot back", func() bool {
		s := h.snapshotNamed("snap")
		return len(s) == 1 && !s[0].Removed && s[0].DeleteAfter == nil && s[0].ReadyToUse
	})
	h.update(func(f *fakeInner) { f.snaps = nil }, "snapshot removed again", func() bool {
		s := h.snapshotNamed("snap")
		return len(s) == 1 && s[0].Removed && s[0].DeleteAfter != nil
	})
	if takes, deletes, _ := p.snapCalls(); len(takes) != 1 || len(deletes) != 0 {
		t.Fatalf("calls: takes %v, deletes %v; want one take, no delete within the reclaim delay", takes, deletes)
	}
	h.stop()

	// The same state, a reclaim delay that has passed: deleted, the record dropped.
	h = startSnap(t, inner, path, p)
	h.expect("snapshot deleted", func() bool { return len(h.snapshotNamed("snap")) == 0 })
	takes, deletes, exist := p.snapCalls()
	if !slices.Equal(deletes, takes) || len(exist) != 0 || len(loadSnaps(t, path)) != 0 {
		t.Errorf("takes %v, deletes %v, left %v, records %v; want the snapshot deleted and forgotten", takes, deletes, exist, loadSnaps(t, path))
	}
}

// A manifest directory that lists nothing deletes no snapshot, whatever
// the reclaim delay: absence is not deletion.
func TestSnapshotOfEmptiedSourceIsKept(t *testing.T) {
	inner := newFakeInner()
	snapWorld(inner, newSnapshot("snap", "s1", "data"))
	path := filepath.Join(t.TempDir(), "claims.json")
	p := newFakeLocal()
	h := startSnap(t, inner, path, p)
	h.expect("snapshot ready", h.readySnapshot("snap", "1Gi"))
	h.update(func(f *fakeInner) { f.snaps, f.claims, f.pods, f.scs = nil, nil, nil, nil }, "the removal held", func() bool {
		s := h.snapshotNamed("snap")
		return len(s) == 1 && strings.Contains(s[0].Error, "an emptied directory never deletes a snapshot")
	})
	h.stop()
	// Started again on an empty directory: nothing counts as removed.
	h = startSnap(t, inner, path, p)
	h.expect("the removal held after a restart", func() bool {
		s := h.snapshotNamed("snap")
		return len(s) == 1 && s[0].Removed && s[0].DeleteAfter == nil
	})
	if _, deletes, _ := p.snapCalls(); len(deletes) != 0 || len(loadSnaps(t, path)) != 1 {
		t.Errorf("deletes %v; want none", deletes)
	}
}

// The snapshot is recorded before it is taken: a binder stopped while
// the call runs (a crash) finds the record after the restart and takes
// the same snapshot (same handle), so nothing is left that no record
// knows.
func TestSnapshotRecordedBeforeItIsTaken(t *testing.T) {
	inner := newFakeInner()
	snapWorld(inner, newSnapshot("snap", "s1", "data"))
	path := filepath.Join(t.TempDir(), "claims.json")
	p := newFakeLocal()
	p.holdTake = make(chan struct{})
	h := startSnap(t, inner, path, p)
	<-p.taking
	recs := loadSnaps(t, path)
	takes, _, _ := p.snapCalls()
	if r, ok := recs[takes[0]]; !ok || r.Step != snapTaking {
		t.Fatalf("records while the call runs: %+v; want %s Taking", recs, takes[0])
	}
	h.stop()
	p2 := newFakeLocal()
	h = startSnap(t, inner, path, p2)
	h.expect("snapshot ready after the restart", h.readySnapshot("snap", "1Gi"))
	if again, _, _ := p2.snapCalls(); !slices.Equal(again, takes) {
		t.Errorf("after the restart TakeSnapshot of %v, want %v again", again, takes)
	}
}

// A VolumeSnapshot made again under the same name with another UID is a
// new snapshot, taken anew: the old one is never given to it, and is
// deleted after the reclaim delay.
func TestSnapshotOfSameNameNewUIDIsNew(t *testing.T) {
	inner := newFakeInner()
	snapWorld(inner, newSnapshot("snap", "s1", "data"))
	path := filepath.Join(t.TempDir(), "claims.json")
	p := newFakeLocal()
	h := startSnap(t, inner, path, p)
	h.expect("first snapshot ready", h.readySnapshot("snap", "1Gi"))
	first := h.snapshotNamed("snap")[0].Snapshot
	h.update(func(f *fakeInner) { f.snaps = []*volumesnapshot.VolumeSnapshot{newSnapshot("snap", "s2", "data")} },
		"the new one taken, the old one deleted", func() bool {
			s := h.snapshotNamed("snap")
			_, deletes, _ := p.snapCalls()
			return len(s) == 1 && s[0].UID == "s2" && s[0].ReadyToUse && slices.Equal(deletes, []string{first})
		})
	if s := h.snapshotNamed("snap")[0]; s.Snapshot == first {
		t.Errorf("the new VolumeSnapshot shows the old snapshot %q", first)
	}
}

// A snapshot whose taking fails is retried, and the failure shown.
func TestSnapshotFailureShown(t *testing.T) {
	inner := newFakeInner()
	snapWorld(inner, newSnapshot("snap", "s1", "data"))
	p := newFakeLocal()
	p.takeErr = errDiskFull
	h := startSnap(t, inner, filepath.Join(t.TempDir(), "claims.json"), p)
	h.eventually("the failure shown", func() bool {
		s := h.snapshotNamed("snap")
		return len(s) == 1 && !s[0].ReadyToUse && strings.Contains(s[0].Error, "failed, retrying: take snapshot") &&
			strings.Contains(s[0].Error, "no space left on device")
	})
}
