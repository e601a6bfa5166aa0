package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
)

// A claim of volumeMode Block of an enforcing class gets a raw block
// volume: a PV of volumeMode Block naming the image, whose loop device the
// backend keeps attached; it is kept in place aside, restored, grown and
// deleted by its image's name. A plain class refuses such a claim.
func TestProvisionBlock(t *testing.T) {
	p, _, root := imageProvisioner(t)
	plain := request("plain", "")
	plain.Claim.Spec.VolumeMode = ptr(v1.PersistentVolumeBlock)
	if _, err := p.Provision(t.Context(), plain); err == nil || !strings.Contains(err.Error(), "a raw block volume is an image") {
		t.Fatalf("Provision of a Block claim of a plain class = %v", err)
	}
	req := enforcing("raw")
	req.Claim.Spec.VolumeMode = ptr(v1.PersistentVolumeBlock)
	req.Claim.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("8Mi")
	pv := provision(t, p, req)
	name := dirName("ns", "raw", req.PVName)
	if want := filepath.Join(root, name+capacity.ImageSuffix); pv.Spec.Local.Path != want || pv.Annotations[AnnCapacity] != "image" ||
		pv.Spec.VolumeMode == nil || *pv.Spec.VolumeMode != v1.PersistentVolumeBlock {
		t.Fatalf("PV = %+v, want a Block PV naming %s", pv.Spec, want)
	}
	if out, err := exec.Command("losetup", "--associated", pv.Spec.Local.Path, "--noheadings", "--output", "NAME").Output(); err != nil || len(strings.Fields(string(out))) != 1 {
		t.Fatalf("loop devices of the image: %q, %v; want one", out, err)
	}
	if err := p.MoveAside(t.Context(), pv); err != nil {
		t.Fatal(err)
	}
	if err := p.Restore(t.Context(), pv); err != nil {
		t.Fatal(err)
	}
	if err := p.Expand(t.Context(), pv, 12<<20); err != nil {
		t.Fatal(err)
	}
	forged := pv.DeepCopy()
	forged.Spec.Local.Path = strings.TrimSuffix(pv.Spec.Local.Path, capacity.ImageSuffix)
	if err := p.Delete(t.Context(), forged); err == nil {
		t.Fatal("Delete of a Block PV that names no image succeeded")
	}
	if err := p.Delete(t.Context(), pv); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, root); !reflect.DeepEqual(got, []string{".capacity", ".snapshots"}) {
		t.Errorf("root holds %v after Delete, want only the records' directories (volumes, snapshots)", got)
	}
	if _, err := os.Lstat(pv.Spec.Local.Path); !os.IsNotExist(err) {
		t.Errorf("image after Delete: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }
