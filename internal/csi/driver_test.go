package csi

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner/local"
)

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// plainDriver is a driver over the real local provisioner on a temporary
// root without a capacity backend (plain directories), on clock c.
func plainDriver(t *testing.T, delay time.Duration, c *clock) (*Driver, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	p, err := local.New(local.Config{Root: root, NodeName: testNode, Mounter: mount.System{}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{Local: p, NodeName: testNode, ReclaimDelay: delay, Logger: zap.NewNop(), Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return d, root
}

var mountRW = &csipb.VolumeCapability{
	AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
	AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}

func createPlain(t *testing.T, d *Driver, name string) string {
	t.Helper()
	resp, err := d.CreateVolume(t.Context(), &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csipb.VolumeCapability{mountRW},
		Parameters: map[string]string{local.ParamEnforce: "false"}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetVolume().GetVolumeId()
}

func code(err error) codes.Code { return status.Code(err) }

// The first DeleteVolume records the time and refuses, naming it and
// how to keep the volume; calls before that time refuse too; the first
// call after it deletes the volume and forgets it.
func TestDeleteVolumeWaitsForTheReclaimDelay(t *testing.T) {
	c := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	d, root := plainDriver(t, 10*time.Minute, c)
	id := createPlain(t, d, "pvc-1")
	del := &csipb.DeleteVolumeRequest{VolumeId: id}
	_, err := d.DeleteVolume(t.Context(), del)
	if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "2026-01-02T03:14:05Z") || !strings.Contains(err.Error(), "Retain") {
		t.Fatalf("first DeleteVolume = %v, want FailedPrecondition naming 2026-01-02T03:14:05Z and Retain", err)
	}
	c.add(9 * time.Minute)
	if _, err := d.DeleteVolume(t.Context(), del); code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "03:14:05Z") {
		t.Fatalf("DeleteVolume before the delay = %v, want FailedPrecondition with the first call's time", err)
	}
	if _, err := os.Stat(filepath.Join(root, id)); err != nil {
		t.Fatalf("the volume went before its delay: %v", err)
	}
	c.add(time.Minute)
	if _, err := d.DeleteVolume(t.Context(), del); err != nil {
		t.Fatalf("DeleteVolume after the delay: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, id)); !os.IsNotExist(err) {
		t.Errorf("the volume is still there after its deletion: %v", err)
	}
	if r, err := d.recs.get(id); r != nil || err != nil {
		t.Errorf("record after deletion = %+v, %v", r, err)
	}
	if _, err := d.DeleteVolume(t.Context(), del); err != nil {
		t.Errorf("DeleteVolume of a deleted volume: %v", err)
	}
}

// With no delay, DeleteVolume deletes at once.
func TestDeleteVolumeWithoutDelay(t *testing.T) {
	d, root := plainDriver(t, 0, &clock{now: time.Now()})
	id := createPlain(t, d, "pvc-1")
	if _, err := d.DeleteVolume(t.Context(), &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, id)); !os.IsNotExist(err) {
		t.Errorf("the volume is still there: %v", err)
	}
}

// A NodePublishVolume (a Retained PV used again) clears a pending
// deletion: the next DeleteVolume starts the delay again. A published
// volume is never deleted.
func TestPublishClearsPendingDeletion(t *testing.T) {
	needRoot(t)
	c := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	d, root := plainDriver(t, 10*time.Minute, c)
	id := createPlain(t, d, "pvc-1")
	del := &csipb.DeleteVolumeRequest{VolumeId: id}
	if _, err := d.DeleteVolume(t.Context(), del); code(err) != codes.FailedPrecondition {
		t.Fatalf("first DeleteVolume = %v", err)
	}
	target := filepath.Join(t.TempDir(), "target")
	pub := &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeCapability: mountRW}
	if _, err := d.NodePublishVolume(t.Context(), pub); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	if r, _ := d.recs.get(id); r == nil || r.DeleteAt != nil {
		t.Fatalf("record after publish = %+v, want no pending deletion", r)
	}
	c.add(11 * time.Minute)
	_, err := d.DeleteVolume(t.Context(), del)
	if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "03:25:05Z") {
		t.Fatalf("DeleteVolume after publish = %v, want FailedPrecondition with a new time 03:25:05Z", err)
	}
	c.add(11 * time.Minute)
	if _, err := d.DeleteVolume(t.Context(), del); code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("DeleteVolume of a published volume = %v, want FailedPrecondition: in use", err)
	}
	if _, err := d.NodeUnpublishVolume(t.Context(), &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DeleteVolume(t.Context(), del); err != nil {
		t.Fatalf("DeleteVolume once unpublished: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, id)); !os.IsNotExist(err) {
		t.Errorf("the volume is still there: %v", err)
	}
}

// health is the volume's health statuses, as "reason" strings.
func health(t *testing.T, d *Driver, id, path string) string {
	t.Helper()
	resp, err := d.NodeGetVolumeHealth(t.Context(), &csipb.NodeGetVolumeHealthRequest{VolumeId: id, VolumePublishPath: path})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, h := range resp.GetVolumeHealth().GetHealthStatuses() {
		if h.GetStatus() != csipb.VolumeHealthErrorType_INACCESSIBLE {
			t.Errorf("status %v, want INACCESSIBLE", h.GetStatus())
		}
		out = append(out, h.GetReason())
	}
	return strings.Join(out, ",")
}

// The volume's health is abnormal when its path is not its mount (not a
// mount, or a mount of something else) and when its storage is gone.
func TestVolumeHealth(t *testing.T) {
	needRoot(t)
	d, root := plainDriver(t, 0, &clock{now: time.Now()})
	id := createPlain(t, d, "pvc-1")
	target := filepath.Join(t.TempDir(), "target")
	if _, err := d.NodePublishVolume(t.Context(), &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeCapability: mountRW}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	if got := health(t, d, id, target); got != "" {
		t.Errorf("published volume: %q, want healthy", got)
	}
	if err := unix.Unmount(target, 0); err != nil {
		t.Fatal(err)
	}
	if got := health(t, d, id, target); got != "NotMounted" {
		t.Errorf("target unmounted behind the driver's back: %q, want NotMounted", got)
	}
	other := t.TempDir()
	if err := unix.Mount(other, target, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if got := health(t, d, id, target); got != "MountReplaced" {
		t.Errorf("another directory bound on the target: %q, want MountReplaced", got)
	}
	if err := unix.Unmount(target, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, id)); err != nil {
		t.Fatal(err)
	}
	if got := health(t, d, id, ""); got != "VolumeMissing" {
		t.Errorf("volume directory removed: %q, want VolumeMissing", got)
	}
	if _, err := d.NodeGetVolumeStats(t.Context(), &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target}); code(err) != codes.NotFound {
		t.Errorf("stats of a volume whose storage is gone = %v, want NotFound", err)
	}
}

// A read-only publish is a read-only bind: writes through it fail, the
// volume itself stays writable.
func TestPublishReadOnly(t *testing.T) {
	needRoot(t)
	d, root := plainDriver(t, 0, &clock{now: time.Now()})
	id := createPlain(t, d, "pvc-1")
	target := filepath.Join(t.TempDir(), "target")
	req := &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeCapability: mountRW, Readonly: true}
	for range 2 { // the second finds it done
		if _, err := d.NodePublishVolume(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(target, "f"), nil, 0o600); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("write through a read-only publish: %v", err)
	}
	if err := os.WriteFile(filepath.Join(root, id, "f"), nil, 0o600); err != nil {
		t.Errorf("the volume itself: %v", err)
	}
	req.Readonly = false
	if _, err := d.NodePublishVolume(t.Context(), req); code(err) != codes.AlreadyExists {
		t.Errorf("publish read-write where it is read-only = %v, want AlreadyExists", err)
	}
}

// IDs that cannot be the driver's are refused before anything is
// touched; a path escaping the root never reaches the file system.
func TestIDsChecked(t *testing.T) {
	d, root := plainDriver(t, 0, &clock{now: time.Now()})
	// What the crafted IDs name, outside the volumes or the driver's own
	// state: none of it may be touched.
	outside := filepath.Join(root, "..", "x")
	if err := os.MkdirAll(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"../x", "a/b", ".csi", ".capacity", "x.img"} {
		_, err := d.NodePublishVolume(t.Context(), &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: "/nonexistent/t", VolumeCapability: mountRW})
		if code(err) != codes.NotFound {
			t.Errorf("publish %q = %v, want NotFound", id, err)
		}
		if _, err := d.DeleteVolume(t.Context(), &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Errorf("delete %q = %v, want nothing done", id, err)
		}
		if _, err := d.DeleteSnapshot(t.Context(), &csipb.DeleteSnapshotRequest{SnapshotId: id}); err != nil {
			t.Errorf("delete snapshot %q = %v, want nothing done", id, err)
		}
		_, err = d.CreateVolume(t.Context(), &csipb.CreateVolumeRequest{Name: id, VolumeCapabilities: []*csipb.VolumeCapability{mountRW}})
		if code(err) != codes.InvalidArgument {
			t.Errorf("create %q = %v, want InvalidArgument", id, err)
		}
	}
	for _, p := range []string{outside, filepath.Join(root, ".csi")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s after requests naming it: %v", p, err)
		}
	}
}

// NodeGetVolumeStats reports the volume's own size and use (its qgroup
// on btrfs, its image's file system on ext4), not the root file system's.
func TestStatsAreTheVolumes(t *testing.T) {
	for _, fs := range []string{"btrfs", "ext4"} {
		t.Run(fs, func(t *testing.T) {
			mnt := loopFS(t, fs, "1G")
			d := newDriver(t, filepath.Join(mnt, "volumes"), 0)
			resp, err := d.CreateVolume(t.Context(), &csipb.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csipb.VolumeCapability{mountRW},
				CapacityRange: &csipb.CapacityRange{RequiredBytes: 64 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetVolume().GetVolumeId()
			target := filepath.Join(t.TempDir(), "target")
			if _, err := d.NodePublishVolume(t.Context(), &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeCapability: mountRW}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
			data := make([]byte, 10<<20)
			for i := range data {
				data[i] = byte(i*7 + 1)
			}
			if err := os.WriteFile(filepath.Join(target, "data"), data, 0o600); err != nil {
				t.Fatal(err)
			}
			unix.Sync()
			st, err := d.NodeGetVolumeStats(t.Context(), &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
			if err != nil {
				t.Fatal(err)
			}
			b := st.GetUsage()[0]
			if b.GetUnit() != csipb.VolumeUsage_BYTES || b.GetUsed() < 10<<20 || b.GetUsed() > 20<<20 || b.GetTotal() > 80<<20 || b.GetTotal() < 60<<20 {
				t.Errorf("bytes %+v: want about 10 MiB used of about 64 MiB (an image holds its request and ext4's own blocks), not the root file system's 1 GiB", b)
			}
			if fs == "ext4" && (len(st.GetUsage()) != 2 || st.GetUsage()[1].GetUsed() < 1) {
				t.Errorf("image volume without inode figures: %+v", st.GetUsage())
			}
			if _, err := d.NodeUnpublishVolume(t.Context(), &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
				t.Fatal(err)
			}
			if _, err := d.DeleteVolume(t.Context(), &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A volume directory replaced by a symlink (a pod cannot do it, root on
// the node can by mistake) is never followed: publish fails and binds
// nothing, so another directory never reaches a pod.
func TestPublishRefusesASymlinkedVolume(t *testing.T) {
	needRoot(t)
	d, root := plainDriver(t, 0, &clock{now: time.Now()})
	id := createPlain(t, d, "pvc-1")
	secret := t.TempDir()
	if err := os.WriteFile(filepath.Join(secret, "key"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, id)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(root, id)); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "target")
	_, err := d.NodePublishVolume(t.Context(), &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeCapability: mountRW})
	if err == nil {
		_ = unix.Unmount(target, unix.MNT_DETACH)
		t.Fatal("published a volume whose directory is a symlink")
	}
	if _, mounted, _ := mount.MountRoot(t.Context(), target); mounted {
		_ = unix.Unmount(target, unix.MNT_DETACH)
		t.Error("the target is a mount after the refusal")
	}
	t.Logf("refused: %v", err)
}

// A raw block volume (an image on a loop device) is published by binding
// its loop device onto the target file: the target is that device, and
// what is written through it is in the image.
func TestPublishBlock(t *testing.T) {
	mnt := loopFS(t, "ext4", "1G")
	d := newDriver(t, filepath.Join(mnt, "volumes"), 0)
	block := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	resp, err := d.CreateVolume(t.Context(), &csipb.CreateVolumeRequest{Name: "pvc-b", VolumeCapabilities: []*csipb.VolumeCapability{block},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 16 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	target := filepath.Join(t.TempDir(), "dev")
	pub := &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeCapability: block}
	for range 2 { // the second finds it done
		if _, err := d.NodePublishVolume(t.Context(), pub); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	var st unix.Stat_t
	if err := unix.Stat(target, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
		t.Fatalf("target %+v, %v: want a block device", st, err)
	}
	if got := health(t, d, id, target); got != "" {
		t.Errorf("published block volume: %q, want healthy", got)
	}
	f, err := os.OpenFile(target, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("block-data"), 4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	img, err := os.ReadFile(filepath.Join(mnt, "volumes", id+".img"))
	if err != nil {
		t.Fatal(err)
	}
	if string(img[4096:4096+10]) != "block-data" {
		t.Error("what was written through the target is not in the image")
	}
	if _, err := d.CreateSnapshot(t.Context(), &csipb.CreateSnapshotRequest{Name: "snap-b", SourceVolumeId: id}); code(err) != codes.InvalidArgument {
		t.Errorf("snapshot of a block volume = %v, want InvalidArgument", err)
	}
	if _, err := d.NodeUnpublishVolume(t.Context(), &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("target after unpublish: %v", err)
	}
	if _, err := d.DeleteVolume(t.Context(), &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
}

// What a SIGKILL can leave between the driver's steps is finished by the
// retry the sidecars make: a record without its volume (killed after
// the record, before the volume was made) is made by CreateVolume again
// or forgotten by DeleteVolume; a record whose volume is gone (killed
// after the deletion, before the record went) is forgotten.
func TestRetriesFinishWhatAKillLeft(t *testing.T) {
	d, root := plainDriver(t, 0, &clock{now: time.Now()})
	create := &csipb.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csipb.VolumeCapability{mountRW},
		Parameters: map[string]string{local.ParamEnforce: "false"}}
	// Killed after the record: the record is there, the volume is not.
	if err := d.recs.put(&record{ID: "pvc-1", Name: "pvc-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateVolume(t.Context(), create); err != nil {
		t.Fatalf("CreateVolume after a kill between record and volume: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(root, "pvc-1")); err != nil || !fi.IsDir() {
		t.Fatalf("volume after the retried CreateVolume: %v", err)
	}
	// Killed after the deletion: the volume is gone, the record is not.
	if err := os.Remove(filepath.Join(root, "pvc-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DeleteVolume(t.Context(), &csipb.DeleteVolumeRequest{VolumeId: "pvc-1"}); err != nil {
		t.Fatalf("DeleteVolume of a volume already gone: %v", err)
	}
	if r, err := d.recs.get("pvc-1"); r != nil || err != nil {
		t.Errorf("record after DeleteVolume: %+v, %v", r, err)
	}
	// A record left without a volume, then the claim went: DeleteVolume
	// forgets it, and a later volume of the same name is a new one.
	if err := d.recs.put(&record{ID: "pvc-2", Name: "pvc-2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DeleteVolume(t.Context(), &csipb.DeleteVolumeRequest{VolumeId: "pvc-2"}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(root, RecordsDir))
	if len(entries) != 1 || entries[0].Name() != SnapshotRecordsDir {
		t.Errorf("records left: %v, want only the snapshots' directory", entries)
	}
}
