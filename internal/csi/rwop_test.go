package csi

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
)

// A ReadWriteOncePod volume published again at the same target (the
// kubelet retries) is done, also when the kubelet's directory is reached
// through a symlink (/var/lib/kubelet on another disk), where the mount
// table shows the resolved path; a second target is refused.
func TestSingleWriterThroughASymlinkedKubeletDir(t *testing.T) {
	needRoot(t)
	d, _ := plainDriver(t, 0, &clock{now: time.Now()})
	id := createPlain(t, d, "pvc-1")
	real := filepath.Join(t.TempDir(), "kubelet")
	if err := os.Mkdir(real, 0o750); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "kubelet")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	rwop := &csipb.VolumeCapability{AccessType: mountRW.AccessType,
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER}}
	target := filepath.Join(link, "pods", "a", "mount")
	for i := range 2 {
		if _, err := d.NodePublishVolume(t.Context(), &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: target, VolumeCapability: rwop}); err != nil {
			t.Fatalf("publish %d at %s: %v", i+1, target, err)
		}
	}
	t.Cleanup(func() { _ = unix.Unmount(filepath.Join(real, "pods", "a", "mount"), unix.MNT_DETACH) })
	other := filepath.Join(link, "pods", "b", "mount")
	if _, err := d.NodePublishVolume(t.Context(), &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: other, VolumeCapability: rwop}); code(err) != codes.FailedPrecondition {
		t.Errorf("publish at a second target = %v, want FailedPrecondition", err)
	}
	if _, err := d.NodeUnpublishVolume(t.Context(), &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.NodePublishVolume(t.Context(), &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: other, VolumeCapability: rwop}); err != nil {
		t.Errorf("publish at the second target once the first is gone: %v", err)
	}
	_, _ = d.NodeUnpublishVolume(t.Context(), &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: other})
}
