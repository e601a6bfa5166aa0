package reconciler

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/volume"
)

var _ volume.BlockMapper = (*fakePlugin)(nil)

// MapDevice records "map uid/volume" and creates an empty file at path.
func (p *fakePlugin) MapDevice(_ context.Context, _ *volume.Spec, path string) (volume.Result, error) {
	p.mu.Lock()
	p.calls = append(p.calls, "map "+volumeOf(path))
	p.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return volume.Result{}, err
	}
	return volume.Result{Path: path}, os.WriteFile(path, nil, 0o600)
}

// UnmapDevice records "unmap uid/volume" and removes the file at path.
func (p *fakePlugin) UnmapDevice(_ context.Context, path string) error {
	p.mu.Lock()
	p.calls = append(p.calls, "unmap "+volumeOf(path))
	p.mu.Unlock()
	return os.Remove(path)
}

func blockVolume(name string) dsw.Volume {
	v := desiredVolume(name, "1")
	v.Block = true
	return v
}

func (h *harness) devicePath(uid, name string) string {
	return h.root.DevicePath(types.UID(uid), testPlugin, name)
}

// A Block volume is published at the pod's volumeDevices path, not set up
// in a volume directory, and its teardown takes it off there; the pod's
// directory then goes whole.
func TestRunPublishesBlockVolumes(t *testing.T) {
	h := newHarness(t, nil)
	h.desired.SetPod(desiredPod("p1", blockVolume("pv")))
	h.desired.SetPod(desiredPod("p2", blockVolume("pv")))
	h.desired.MarkPopulated()
	h.start(t)
	for _, uid := range []string{"p1", "p2"} {
		v := h.waitMounted(t, uid, "pv", "1")
		if !v.Block || v.Dir != h.devicePath(uid, "pv") || v.Path != v.Dir {
			t.Fatalf("actual volume = %+v, want a Block volume at %s", v, h.devicePath(uid, "pv"))
		}
		if exists(h.volumeDir(uid, "pv")) || !exists(v.Dir) {
			t.Fatalf("%s: a volume directory, or no published device", uid)
		}
	}
	if got := h.plugin.callsOf("setup"); len(got) != 0 {
		t.Fatalf("SetUp called for Block volumes: %v", got)
	}
	h.desired.DeletePod("p1")
	waitFor(t, "pod p1's directory to go", func() bool { return !exists(h.root.PodDir("p1")) })
	if got := h.plugin.callsOf("unmap"); !slices.Equal(got, []string{"unmap p1/pv"}) {
		t.Fatalf("unmaps = %v", got)
	}
	if !exists(h.devicePath("p2", "pv")) {
		t.Fatal("another pod's device was touched")
	}
}

// After a restart a published device is found in volumeDevices: a wanted
// one is published again (which changes nothing that is right), an
// orphan is taken off once the desired state is populated and its pod's
// removal counts.
func TestRunReconstructsBlockVolumes(t *testing.T) {
	h := newHarness(t, nil)
	writeFile(t, h.devicePath("wanted", "pv"), "")
	writeFile(t, h.devicePath("orphan", "pv"), "")
	h.desired.SetPod(desiredPod("wanted", blockVolume("pv")))
	h.start(t)
	h.waitMounted(t, "wanted", "pv", "1")
	v, ok := h.actualVolume("orphan", "pv")
	if want := (asw.Volume{PodUID: "orphan", Name: "pv", Plugin: testPlugin, Dir: h.devicePath("orphan", "pv"), Path: h.devicePath("orphan", "pv"),
		State: asw.Uncertain, Reconstructed: true, Block: true}); !ok || v != want {
		t.Fatalf("reconstructed volume = %+v, %v; want %+v", v, ok, want)
	}
	h.desired.MarkPopulated()
	h.desired.MarkRemoved("orphan")
	waitFor(t, "pod orphan's directory to go", func() bool { return !exists(h.root.PodDir("orphan")) })
	if got := h.plugin.callsOf("unmap"); !slices.Equal(got, []string{"unmap orphan/pv"}) {
		t.Fatalf("unmaps = %v", got)
	}
	if got := h.plugin.callsOf("map"); !slices.Equal(got, []string{"map wanted/pv"}) {
		t.Fatalf("maps = %v", got)
	}
}

// A set-up volume is kept when the desired state wants it in the other
// mode: it is neither set up again nor torn down.
func TestPlanKeepsAVolumeWhoseModeChanged(t *testing.T) {
	d := desiredPod("p1", blockVolume("pv"))
	a := asw.Volume{PodUID: "p1", Name: "pv", Plugin: testPlugin, State: asw.Uncertain}
	if got := plan(snapshot{desired: []dsw.Pod{d}, actual: []asw.Volume{a}, populated: true}); len(got) != 0 {
		t.Fatalf("plan = %+v, want nothing", got)
	}
}

// A volume directory and a published device of one name in one pod (a
// PV whose volumeMode changed under a running pod): the directory's volume
// is reconstructed, the device is left alone, never torn down.
func TestReconstructLeavesADeviceNamedLikeAVolume(t *testing.T) {
	h := newHarness(t, nil)
	mkdirAll(t, h.volumeDir("p1", "pv"))
	writeFile(t, h.devicePath("p1", "pv"), "")
	h.desired.MarkPopulated()
	h.desired.MarkRemoved("p1")
	h.start(t)
	waitFor(t, "the volume directory torn down", func() bool { return !exists(h.volumeDir("p1", "pv")) })
	if got := h.plugin.callsOf("unmap"); len(got) != 0 {
		t.Fatalf("unmaps = %v, want none", got)
	}
	if !exists(h.devicePath("p1", "pv")) {
		t.Fatal("the device left alone was removed")
	}
}
