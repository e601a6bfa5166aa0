package reconciler

import (
	"context"
	"errors"
	"testing"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// TestReconstructedSwap: volumes found on disk say whether their tmpfs has
// noswap, from one read of the mount table; a set-up that mounts nothing
// keeps what was found, one that mounts reports anew.
func TestReconstructedSwap(t *testing.T) {
	var reads int
	var h *harness
	h = newHarness(t, func(c *Config) {
		c.MountedNoSwap = func(_ context.Context, dir string) (map[string]bool, error) {
			reads++
			if dir != h.root.PodsDir() {
				t.Errorf("mount table read for %s, want the pods directory", dir)
			}
			return map[string]bool{h.volumeDir("p", "with"): true, h.volumeDir("p", "without"): false}, nil
		}
	})
	for _, name := range []string{"with", "without", "disk"} {
		mkdirAll(t, h.volumeDir("p", name))
	}
	h.start(t)
	waitFor(t, "the actual state rebuilt", h.r.Recovered)
	if reads != 1 {
		t.Errorf("mount table read %d times, want once", reads)
	}
	for name, want := range map[string]volume.Swap{"with": volume.SwapNever, "without": volume.SwapAllowed, "disk": volume.SwapUnknown} {
		if v, _ := h.actualVolume("p", name); v.Swap != want {
			t.Errorf("found volume %s has swap %v, want %v", name, v.Swap, want)
		}
	}

	h.desired.SetPod(desiredPod("p", desiredVolume("with", "1"), desiredVolume("without", "1"), desiredVolume("disk", "1")))
	h.waitMounted(t, "p", "without", "1")
	if v, _ := h.actualVolume("p", "without"); v.Swap != volume.SwapAllowed {
		t.Errorf("set up again without a mount: swap %v, want the SwapAllowed found on disk", v.Swap)
	}
	h.plugin.set(func(p *fakePlugin) { p.swap = volume.SwapNever })
	h.desired.SetPod(desiredPod("p", desiredVolume("with", "1"), desiredVolume("without", "2"), desiredVolume("disk", "1")))
	if v := h.waitMounted(t, "p", "without", "2"); v.Swap != volume.SwapNever {
		t.Errorf("after a set-up that mounted with noswap: swap %v, want SwapNever", v.Swap)
	}
}

// TestReconstructWithoutMountTable: a mount table that cannot be read
// leaves swap unknown and reconstruction goes on.
func TestReconstructWithoutMountTable(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.MountedNoSwap = func(context.Context, string) (map[string]bool, error) { return nil, errors.New("injected") }
	})
	mkdirAll(t, h.volumeDir("p", "v"))
	h.start(t)
	waitFor(t, "the actual state rebuilt", h.r.Recovered)
	if v, ok := h.actualVolume("p", "v"); !ok || v.Swap != volume.SwapUnknown {
		t.Errorf("found volume = %+v, %v; want it, with swap unknown", v, ok)
	}
}
