package csi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// TestCopiesOfAVolumeWithNestedSubvolumesRefused: on btrfs, a snapshot or
// a clone of a volume holding a subvolume a pod made would silently lack
// that subvolume's content. CreateSnapshot and CreateVolume from the
// volume refuse with FailedPrecondition (the sidecars retry, and the
// message says what to do), leave no snapshot or volume, and work once
// the nested subvolume is gone.
func TestCopiesOfAVolumeWithNestedSubvolumesRefused(t *testing.T) {
	root := filepath.Join(loopFS(t, "btrfs", "512M"), "root")
	d := newDriver(t, root, 0)
	ctx := t.Context()
	resp, err := d.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "vol", VolumeCapabilities: []*csipb.VolumeCapability{mountRW},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	nested := filepath.Join(root, id, "sub")
	sh(t, "btrfs", "subvolume", "create", nested)
	if err := os.WriteFile(filepath.Join(nested, "data"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = d.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: "snap", SourceVolumeId: id})
	if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "btrfs subvolume delete") {
		t.Errorf("CreateSnapshot of a volume holding a nested subvolume: %v; want FailedPrecondition saying what to do", err)
	}
	_, err = d.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "clone", VolumeCapabilities: []*csipb.VolumeCapability{mountRW},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 64 << 20},
		VolumeContentSource: &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{
			Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: id}}}})
	if code(err) != codes.FailedPrecondition {
		t.Errorf("CreateVolume cloning a volume holding a nested subvolume: %v; want FailedPrecondition", err)
	}
	snaps, err := d.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{})
	if err != nil || len(snaps.GetEntries()) != 0 {
		t.Errorf("ListSnapshots after the refusal: %v, %v; want none", snaps.GetEntries(), err)
	}
	vols, err := d.ListVolumes(ctx, &csipb.ListVolumesRequest{})
	if err != nil || len(vols.GetEntries()) != 1 {
		t.Errorf("ListVolumes after the refused clone: %v, %v; want the source alone", vols.GetEntries(), err)
	}
	sh(t, "btrfs", "subvolume", "delete", nested)
	if _, err := d.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: "snap", SourceVolumeId: id}); err != nil {
		t.Errorf("CreateSnapshot once the nested subvolume is gone: %v", err)
	}
}
