package local

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// csiSwapSpec is pod web's claim volume bound to a CSI PV of the local
// driver whose volume is d.vol, under its parent as the local path root,
// and the plugin that sets it up.
func csiSwapSpec(d *swapDirs) (*CSIPlugin, *volume.Spec) {
	s := localSpec("")
	s.PV.Spec.Local = nil
	s.PV.Spec.CSI = &v1.CSIPersistentVolumeSource{Driver: Driver, VolumeHandle: filepath.Base(d.vol)}
	s.Node = &v1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"disk": "ssd"}}}
	s.PV.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: "disk", Operator: v1.NodeSelectorOpIn, Values: []string{"ssd"}}},
	}}}}
	return &CSIPlugin{Local: &Plugin{Mounter: mount.System{}, NodeName: "node-1"}, Root: filepath.Dir(d.vol)}, s
}

// TestCSIMountsWhatItChecked: the volume under the root is swapped for a
// symlink to another directory after the agent opened and checked it and
// before it mounts; the mount shows the volume checked.
func TestCSIMountsWhatItChecked(t *testing.T) {
	d := newSwapDirs(t, 0)
	p, s := csiSwapSpec(d)
	mountsWhatItChecked(t, d, p, s)
}

// TestCSIHandleSwapRace: the volume under the root is swapped for a
// symlink to another directory and back, as fast as can be, while the
// agent sets it up and tears it down again and again: each set-up shows
// the volume, or is refused (a symlink, or nothing, is there); none shows
// the other directory.
func TestCSIHandleSwapRace(t *testing.T) {
	d := newSwapDirs(t, 0)
	defer swapping(t, d)()
	p, s := csiSwapSpec(d)
	const setUps = 300
	refused := 0
	for i := range setUps {
		dir := plugintest.VolumeDir(t)
		if _, err := p.SetUp(t.Context(), s, dir); err != nil {
			if !strings.Contains(err.Error(), "is a symlink, refused") && !strings.Contains(err.Error(), "does not exist on this node") {
				t.Fatalf("set-up %d: %v; want a refusal of the symlink, or the volume missing", i, err)
			}
			if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("set-up %d: refused, and left %s", i, dir)
			}
			refused++
			continue
		}
		if id, _, err := mount.MountRoot(t.Context(), dir); err != nil || id != d.volID {
			t.Fatalf("set-up %d of %d: the mount shows %+v (%v), not the volume %+v (the other is %+v)", i+1, setUps, id, err, d.volID, d.otherID)
		}
		if err := p.TearDown(t.Context(), dir); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d of %d set-ups refused, the others showed the volume", refused, setUps)
}
