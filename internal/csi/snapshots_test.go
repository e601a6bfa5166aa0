package csi

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
	"github.com/volume-agent/volume-agent/internal/provisioner/local"
)

// snapDriver is a driver over the real local provisioner and capacity
// backend on root (a btrfs with quotas), with the reclaim delay given, on
// clock c. Called again on the same root, it is the driver of an agent
// started again.
func snapDriver(t *testing.T, root string, delay time.Duration, c *clock) *Driver {
	t.Helper()
	log := zap.NewNop()
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := capacity.Open(t.Context(), capacity.Config{Root: root, Logger: log, EnableBtrfsQuota: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	p, err := local.New(local.Config{Root: root, NodeName: testNode, Mounter: mount.System{}, Logger: log, Capacity: b})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{Local: p, NodeName: testNode, Version: "test", ReclaimDelay: delay, Logger: log, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// snapshotOf makes the CSI volume name (16 MiB, enforced) and takes the
// snapshot snap of it.
func snapshotOf(t *testing.T, d *Driver, name, snap string) string {
	t.Helper()
	resp, err := d.CreateVolume(t.Context(), &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csipb.VolumeCapability{mountRW},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 16 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	if _, err := d.CreateSnapshot(t.Context(), &csipb.CreateSnapshotRequest{Name: snap, SourceVolumeId: id}); err != nil {
		t.Fatal(err)
	}
	return id
}

// backendHas reports whether the capacity backend has the snapshot snap,
// ready, and its subvolume is under the root's snapshot directory.
func backendHas(t *testing.T, d *Driver, snap string) bool {
	t.Helper()
	_, err := d.cfg.Local.SnapshotInfo(t.Context(), snap)
	if err != nil && !errors.Is(err, capacity.ErrNotFound) {
		t.Fatal(err)
	}
	_, serr := os.Lstat(filepath.Join(d.cfg.Local.Root(), capacity.SnapshotDir, snap))
	if (err == nil) != (serr == nil) {
		t.Fatalf("snapshot %s: the backend says %v, its directory %v", snap, err, serr)
	}
	return err == nil
}

// listed is the snapshot IDs ListSnapshots answers.
func listed(t *testing.T, d *Driver) []string {
	t.Helper()
	resp, err := d.ListSnapshots(t.Context(), &csipb.ListSnapshotsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range resp.GetEntries() {
		out = append(out, e.GetSnapshot().GetSnapshotId())
	}
	return out
}

// The first DeleteSnapshot records when the reclaim delay ends and
// refuses, naming the snapshot, that time and how to keep it; the
// snapshot stays (listed, restorable) until then, across a restart of
// the agent, which keeps the first call's time; the first call after it
// deletes the snapshot from the backend and forgets it; a call after
// that succeeds.
func TestDeleteSnapshotWaitsForTheReclaimDelay(t *testing.T) {
	root := filepath.Join(loopFS(t, "btrfs", "1G"), "volumes")
	c := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	d := snapDriver(t, root, 10*time.Minute, c)
	vol := snapshotOf(t, d, "pvc-1", "snapshot-1")
	del := &csipb.DeleteSnapshotRequest{SnapshotId: "snapshot-1"}
	_, err := d.DeleteSnapshot(t.Context(), del)
	if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "snapshot-1") ||
		!strings.Contains(err.Error(), "2026-01-02T03:14:05Z") || !strings.Contains(err.Error(), "deletionPolicy to Retain") {
		t.Fatalf("first DeleteSnapshot = %v, want FailedPrecondition naming snapshot-1, 2026-01-02T03:14:05Z and deletionPolicy Retain", err)
	}
	if !backendHas(t, d, "snapshot-1") {
		t.Fatal("the snapshot went at the first DeleteSnapshot")
	}

	// The agent starts again: the pending deletion and its time are kept.
	c.add(9 * time.Minute)
	d = snapDriver(t, root, 10*time.Minute, c)
	if _, err := d.DeleteSnapshot(t.Context(), del); code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "03:14:05Z") {
		t.Fatalf("DeleteSnapshot after a restart, before the delay = %v, want FailedPrecondition with the first call's time", err)
	}
	if got := listed(t, d); len(got) != 1 || got[0] != "snapshot-1" {
		t.Errorf("ListSnapshots during the delay = %v, want snapshot-1", got)
	}
	if _, err := d.GetSnapshot(t.Context(), &csipb.GetSnapshotRequest{SnapshotId: "snapshot-1"}); err != nil {
		t.Errorf("GetSnapshot during the delay: %v", err)
	}
	restore := &csipb.CreateVolumeRequest{Name: "pvc-2", VolumeCapabilities: []*csipb.VolumeCapability{mountRW},
		CapacityRange:       &csipb.CapacityRange{RequiredBytes: 16 << 20},
		VolumeContentSource: &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: "snapshot-1"}}}}
	if _, err := d.CreateVolume(t.Context(), restore); err != nil {
		t.Errorf("restore during the delay: %v", err)
	}

	c.add(time.Minute)
	if _, err := d.DeleteSnapshot(t.Context(), del); err != nil {
		t.Fatalf("DeleteSnapshot after the delay: %v", err)
	}
	if backendHas(t, d, "snapshot-1") {
		t.Error("the snapshot is still in the backend after its deletion")
	}
	if r, err := d.snaps.get("snapshot-1"); r != nil || err != nil {
		t.Errorf("record after deletion = %+v, %v", r, err)
	}
	if _, err := d.DeleteSnapshot(t.Context(), del); err != nil {
		t.Errorf("DeleteSnapshot of a deleted snapshot: %v", err)
	}
	if _, err := d.GetSnapshot(t.Context(), &csipb.GetSnapshotRequest{SnapshotId: "snapshot-1"}); code(err) != codes.NotFound {
		t.Errorf("GetSnapshot of a deleted snapshot = %v, want NotFound", err)
	}
	for _, v := range []string{vol, "pvc-2"} {
		if _, err := d.DeleteVolume(t.Context(), &csipb.DeleteVolumeRequest{VolumeId: v}); code(err) != codes.FailedPrecondition {
			t.Errorf("DeleteVolume %s = %v, want the reclaim delay", v, err)
		}
	}
}

// With no delay (csi-sanity's), DeleteSnapshot deletes at once.
func TestDeleteSnapshotWithoutDelay(t *testing.T) {
	root := filepath.Join(loopFS(t, "btrfs", "1G"), "volumes")
	d := snapDriver(t, root, 0, &clock{now: time.Now()})
	snapshotOf(t, d, "pvc-1", "snapshot-1")
	if _, err := d.DeleteSnapshot(t.Context(), &csipb.DeleteSnapshotRequest{SnapshotId: "snapshot-1"}); err != nil {
		t.Fatal(err)
	}
	if backendHas(t, d, "snapshot-1") {
		t.Error("the snapshot is still there")
	}
}

// A CreateSnapshot of the same name and source (the content made again)
// clears a pending deletion: the next DeleteSnapshot starts the delay
// again. The same name of another volume is refused, pending or not.
func TestCreateSnapshotClearsPendingDeletion(t *testing.T) {
	root := filepath.Join(loopFS(t, "btrfs", "1G"), "volumes")
	c := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	d := snapDriver(t, root, 10*time.Minute, c)
	vol := snapshotOf(t, d, "pvc-1", "snapshot-1")
	del := &csipb.DeleteSnapshotRequest{SnapshotId: "snapshot-1"}
	if _, err := d.DeleteSnapshot(t.Context(), del); code(err) != codes.FailedPrecondition {
		t.Fatalf("first DeleteSnapshot = %v", err)
	}
	other := snapshotOf(t, d, "pvc-2", "snapshot-2")
	if _, err := d.CreateSnapshot(t.Context(), &csipb.CreateSnapshotRequest{Name: "snapshot-1", SourceVolumeId: other}); code(err) != codes.AlreadyExists {
		t.Errorf("snapshot-1 of another volume = %v, want AlreadyExists", err)
	}
	if r, _ := d.snaps.get("snapshot-1"); r == nil || r.DeleteAt == nil {
		t.Fatalf("a refused CreateSnapshot changed the pending deletion: %+v", r)
	}
	resp, err := d.CreateSnapshot(t.Context(), &csipb.CreateSnapshotRequest{Name: "snapshot-1", SourceVolumeId: vol})
	if err != nil || resp.GetSnapshot().GetSnapshotId() != "snapshot-1" {
		t.Fatalf("CreateSnapshot again = %v, %v", resp, err)
	}
	if r, _ := d.snaps.get("snapshot-1"); r == nil || r.DeleteAt != nil {
		t.Fatalf("record after CreateSnapshot again = %+v, want no pending deletion", r)
	}
	c.add(11 * time.Minute)
	if _, err := d.DeleteSnapshot(t.Context(), del); code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "03:25:05Z") {
		t.Fatalf("DeleteSnapshot after CreateSnapshot again = %v, want FailedPrecondition with a new time 03:25:05Z", err)
	}
	if !backendHas(t, d, "snapshot-1") {
		t.Error("the snapshot went")
	}
}

// saveRestoreRecord writes the capacity backend's record of the volume
// name being made from the snapshot snap, as CreateFrom writes it first:
// a restore under way (or cut short by a kill, until the backend's
// Recover rolls it back).
func saveRestoreRecord(t *testing.T, root, name, snap string) string {
	t.Helper()
	path := filepath.Join(root, ".capacity", name+".json")
	rec := `{"name":"` + name + `","backend":"btrfs","state":"creating","size":16777216,"origin":{"snapshot":"` + snap + `"}}`
	if err := os.WriteFile(path, []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// After the delay, a snapshot a volume is being made from is not
// deleted: DeleteSnapshot is refused, FailedPrecondition (csi-snapshotter
// retries), naming the restore; once it is done the next call deletes.
func TestDeleteSnapshotRefusedWhileRestoring(t *testing.T) {
	root := filepath.Join(loopFS(t, "btrfs", "1G"), "volumes")
	c := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	d := snapDriver(t, root, 10*time.Minute, c)
	snapshotOf(t, d, "pvc-1", "snapshot-1")
	del := &csipb.DeleteSnapshotRequest{SnapshotId: "snapshot-1"}
	if _, err := d.DeleteSnapshot(t.Context(), del); code(err) != codes.FailedPrecondition {
		t.Fatalf("first DeleteSnapshot = %v", err)
	}
	c.add(10 * time.Minute)
	restore := saveRestoreRecord(t, root, "pvc-restore", "snapshot-1")
	_, err := d.DeleteSnapshot(t.Context(), del)
	if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "a volume is being made from the snapshot") || !strings.Contains(err.Error(), "pvc-restore") {
		t.Fatalf("DeleteSnapshot during a restore = %v, want FailedPrecondition naming the restore", err)
	}
	t.Logf("refused: %v", err)
	if !backendHas(t, d, "snapshot-1") {
		t.Fatal("the snapshot went during a restore from it")
	}
	if r, _ := d.snaps.get("snapshot-1"); r == nil {
		t.Fatal("the record went during a restore from the snapshot")
	}
	if err := os.Remove(restore); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DeleteSnapshot(t.Context(), del); err != nil {
		t.Fatalf("DeleteSnapshot once the restore is done: %v", err)
	}
	if backendHas(t, d, "snapshot-1") {
		t.Error("the snapshot is still there")
	}
}

// What a SIGKILL leaves between the driver's steps is finished by the
// retries csi-snapshotter makes: a record written before the snapshot
// was taken is neither listed nor found, and CreateSnapshot takes it
// again, or DeleteSnapshot forgets it; a snapshot deleted from the
// backend whose record was not removed yet is forgotten by the next
// DeleteSnapshot.
func TestSnapshotRetriesFinishWhatAKillLeft(t *testing.T) {
	root := filepath.Join(loopFS(t, "btrfs", "1G"), "volumes")
	d := snapDriver(t, root, time.Hour, &clock{now: time.Now()})
	vol := snapshotOf(t, d, "pvc-1", "snapshot-1")
	// Killed after the record, before the snapshot.
	if err := d.snaps.put(&snapRecord{ID: "snapshot-2", Source: vol, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if got := listed(t, d); len(got) != 1 || got[0] != "snapshot-1" {
		t.Errorf("ListSnapshots = %v, want only snapshot-1 (snapshot-2 is not taken)", got)
	}
	if _, err := d.GetSnapshot(t.Context(), &csipb.GetSnapshotRequest{SnapshotId: "snapshot-2"}); code(err) != codes.NotFound {
		t.Errorf("GetSnapshot of a snapshot not taken = %v, want NotFound", err)
	}
	if _, err := d.CreateSnapshot(t.Context(), &csipb.CreateSnapshotRequest{Name: "snapshot-2", SourceVolumeId: vol}); err != nil {
		t.Fatalf("CreateSnapshot after a kill between record and snapshot: %v", err)
	}
	if !backendHas(t, d, "snapshot-2") {
		t.Fatal("the retried CreateSnapshot took no snapshot")
	}
	// Killed after the record, and the VolumeSnapshotContent deleted
	// before a retry: DeleteSnapshot forgets the record at once.
	if err := d.snaps.put(&snapRecord{ID: "snapshot-3", Source: vol, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DeleteSnapshot(t.Context(), &csipb.DeleteSnapshotRequest{SnapshotId: "snapshot-3"}); err != nil {
		t.Fatalf("DeleteSnapshot of a snapshot never taken: %v", err)
	}
	if r, _ := d.snaps.get("snapshot-3"); r != nil {
		t.Errorf("record of a snapshot never taken kept: %+v", r)
	}
	// Killed after the backend deleted it, before the record went.
	if err := d.cfg.Local.DeleteSnapshot(t.Context(), "snapshot-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DeleteSnapshot(t.Context(), &csipb.DeleteSnapshotRequest{SnapshotId: "snapshot-1"}); err != nil {
		t.Fatalf("DeleteSnapshot of a snapshot already deleted: %v", err)
	}
	if r, _ := d.snaps.get("snapshot-1"); r != nil {
		t.Errorf("record of a deleted snapshot kept: %+v", r)
	}
	// A CreateSnapshot the backend refuses once the record is written
	// (files of the snapshot's name it did not make) keeps no record.
	if err := os.Mkdir(filepath.Join(root, capacity.SnapshotDir, "snapshot-4"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := d.CreateSnapshot(t.Context(), &csipb.CreateSnapshotRequest{Name: "snapshot-4", SourceVolumeId: vol})
	if err == nil || !strings.Contains(err.Error(), "not made by volume-agent") {
		t.Errorf("snapshot over files the backend did not make = %v, want refused", err)
	}
	if r, _ := d.snaps.get("snapshot-4"); r != nil {
		t.Errorf("record of a refused snapshot: %+v", r)
	}
}

// The capacity backend also holds manifest mode's snapshots and volumes
// (taken and made through the same local provisioner, recorded by the
// binder): none is the driver's. ListSnapshots and ListVolumes leave them
// out, GetSnapshot and a restore do not find such a snapshot,
// DeleteSnapshot leaves it alone, and CreateSnapshot does not take its
// name.
func TestCSIListsAndTouchesOnlyItsOwn(t *testing.T) {
	root := filepath.Join(loopFS(t, "btrfs", "1G"), "volumes")
	d := snapDriver(t, root, 0, &clock{now: time.Now()})
	vol := snapshotOf(t, d, "pvc-1", "snapshot-csi")
	// The binder's volume and snapshot, through the local provisioner.
	p := d.cfg.Local
	if _, err := p.CreateVolume(t.Context(), local.Spec{Name: "ns-claim-pv-m", Params: local.Params{Enforce: true}, Size: 16 << 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SnapshotVolume(t.Context(), local.Vol{Name: "ns-claim-pv-m", Capacity: p.Kind(), Owner: "pv-m"}, "snapshot-manifest"); err != nil {
		t.Fatal(err)
	}

	if got := listed(t, d); len(got) != 1 || got[0] != "snapshot-csi" {
		t.Errorf("ListSnapshots = %v, want only the driver's snapshot-csi", got)
	}
	vols, err := d.ListVolumes(t.Context(), &csipb.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if e := vols.GetEntries(); len(e) != 1 || e[0].GetVolume().GetVolumeId() != vol {
		t.Errorf("ListVolumes = %v, want only the driver's %s", e, vol)
	}
	if _, err := d.GetSnapshot(t.Context(), &csipb.GetSnapshotRequest{SnapshotId: "snapshot-manifest"}); code(err) != codes.NotFound {
		t.Errorf("GetSnapshot of manifest mode's snapshot = %v, want NotFound", err)
	}
	restore := &csipb.CreateVolumeRequest{Name: "pvc-2", VolumeCapabilities: []*csipb.VolumeCapability{mountRW},
		CapacityRange:       &csipb.CapacityRange{RequiredBytes: 16 << 20},
		VolumeContentSource: &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: "snapshot-manifest"}}}}
	if _, err := d.CreateVolume(t.Context(), restore); code(err) != codes.NotFound {
		t.Errorf("restore from manifest mode's snapshot = %v, want NotFound", err)
	}
	if _, err := d.CreateSnapshot(t.Context(), &csipb.CreateSnapshotRequest{Name: "snapshot-manifest", SourceVolumeId: vol}); code(err) != codes.AlreadyExists {
		t.Errorf("CreateSnapshot of manifest mode's snapshot's name = %v, want AlreadyExists", err)
	}
	if _, err := d.DeleteSnapshot(t.Context(), &csipb.DeleteSnapshotRequest{SnapshotId: "snapshot-manifest"}); err != nil {
		t.Errorf("DeleteSnapshot of a snapshot not the driver's: %v, want nothing done", err)
	}
	if !backendHas(t, d, "snapshot-manifest") {
		t.Error("a CSI DeleteSnapshot deleted manifest mode's snapshot")
	}
}

// deletionOf: the first call records now + delay and waits; calls before
// that time wait with it; calls at or after it delete; no delay deletes
// at once, whatever was recorded.
func TestDeletionOf(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	for _, c := range []struct {
		name  string
		asked *time.Time
		delay time.Duration
		want  deletion
	}{
		{"first call", nil, time.Minute, deletion{At: now.Add(time.Minute), Record: true, Wait: true}},
		{"before the time", at(time.Second), time.Minute, deletion{At: now.Add(time.Second), Wait: true}},
		{"at the time", at(0), time.Minute, deletion{At: now}},
		{"after the time", at(-time.Second), time.Minute, deletion{At: now.Add(-time.Second)}},
		{"recorded under a longer delay", at(time.Hour), time.Minute, deletion{At: now.Add(time.Hour), Wait: true}},
		{"no delay", nil, 0, deletion{}},
		{"no delay, recorded before", at(time.Hour), 0, deletion{}},
	} {
		if got := deletionOf(c.asked, now, c.delay); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// A multi-node access mode is refused naming the claim's mode, the modes
// served, and how to mount a claim read-only; ReadOnlyMany is never
// suggested (Kubernetes asks for it as a mode of several nodes).
func TestAccessModeRefusal(t *testing.T) {
	for m, claim := range map[csipb.VolumeCapability_AccessMode_Mode]string{
		csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:   "ReadOnlyMany",
		csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:  "ReadWriteMany",
		csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER: "",
	} {
		err := checkCap(&csipb.VolumeCapability{AccessType: mountRW.GetAccessType(), AccessMode: &csipb.VolumeCapability_AccessMode{Mode: m}}, true)
		msg := err.Error()
		if code(err) != codes.InvalidArgument || !strings.Contains(msg, m.String()) || !strings.Contains(msg, "ReadWriteOnce or ReadWriteOncePod") ||
			!strings.Contains(msg, "readOnly: true") || strings.Contains(msg, "or ReadOnlyMany") {
			t.Errorf("%s: %v", m, err)
		}
		if claim != "" && !strings.Contains(msg, "a claim's "+claim+")") {
			t.Errorf("%s: %v: does not name the claim's %s", m, err, claim)
		}
	}
}
