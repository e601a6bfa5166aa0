package local

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// csiSwapSpec is pod web's claim volume bound to a CSI PV of the local
// driver whose volume is d.vol, under its parent as the local path root.
func csiSwapSpec(d *swapDirs) (*CSIPlugin, *volume.Spec) {
	s := localSpec("")
	s.PV.Spec.Local = nil
	s.PV.Spec.CSI = &v1.CSIPersistentVolumeSource{Driver: Driver, VolumeHandle: filepath.Base(d.vol)}
	s.PV.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{"node-1"}}},
	}}}}
	return &CSIPlugin{Local: &Plugin{Mounter: mount.System{}, NodeName: "node-1"}, Root: filepath.Dir(d.vol)}, s
}

// TestCSIMountsWhatItChecked: the volume under the root is swapped for a
// symlink to another directory after the agent opened and checked it and
// before it mounts; the mount shows the volume checked.
func TestCSIMountsWhatItChecked(t *testing.T) {
	d := newSwapDirs(t, 0)
	testHookOpened = func() {
		if err := d.swap(); err != nil {
			t.Error(err)
		}
	}
	defer func() { testHookOpened = nil }()
	p, s := csiSwapSpec(d)
	dir := plugintest.VolumeDir(t)
	if _, err := p.SetUp(t.Context(), s, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.TearDown(t.Context(), dir) })
	id, mounted, err := mount.MountRoot(t.Context(), dir)
	if err != nil || !mounted || id != d.volID {
		t.Errorf("the mount shows %+v (mounted %v, %v); want the volume %+v (the other is %+v)", id, mounted, err, d.volID, d.otherID)
	}
	if got := plugintest.ReadFile(t, filepath.Join(dir, "f")); got != "volume" {
		t.Errorf("the volume holds %q; want the volume's file", got)
	}
}

// TestCSIHandleSwapRace: the volume under the root is swapped for a
// symlink to another directory and back, as fast as can be, while the
// agent sets it up and tears it down again and again: each set-up shows
// the volume, or is refused (a symlink, or nothing, is there); none shows
// the other directory.
func TestCSIHandleSwapRace(t *testing.T) {
	d := newSwapDirs(t, 0)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if err := d.swap(); err != nil {
				t.Error(err)
				return
			}
			if err := d.unswap(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()
	p, s := csiSwapSpec(d)
	const setUps = 300
	refused := 0
	for i := range setUps {
		dir := plugintest.VolumeDir(t)
		_, err := p.SetUp(t.Context(), s, dir)
		if err != nil {
			if !strings.Contains(err.Error(), "is a symlink, refused") && !strings.Contains(err.Error(), "does not exist on this node") {
				t.Fatalf("set-up %d: %v; want a refusal of the symlink, or the volume missing", i, err)
			}
			if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("set-up %d: refused, and left %s", i, dir)
			}
			refused++
			continue
		}
		id, _, err := mount.MountRoot(t.Context(), dir)
		if err != nil {
			t.Fatal(err)
		}
		if id != d.volID {
			t.Fatalf("set-up %d of %d: the mount shows %+v, not the volume %+v (the other is %+v)", i+1, setUps, id, d.volID, d.otherID)
		}
		if err := p.TearDown(t.Context(), dir); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d of %d set-ups refused, the others showed the volume", refused, setUps)
}
