package reconciler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
)

// TestReconstructedAccess: volumes found on disk say whether their mount
// is read-only, from one read of the mount table (published devices are
// not asked about); one found mounted as its spec asks, or without a
// mount, is set up again and records what the set-up asked; one found
// mounted the other way is kept as it is, never set up again.
func TestReconstructedAccess(t *testing.T) {
	var asked [][]string
	var h *harness
	h = newHarness(t, func(c *Config) {
		c.MountedReadOnly = func(_ context.Context, dirs []string) (map[string]bool, error) {
			asked = append(asked, slices.Sorted(slices.Values(dirs)))
			return map[string]bool{h.volumeDir("p", "ro"): true, h.volumeDir("p", "rw"): false}, nil
		}
	})
	for _, name := range []string{"ro", "rw", "plain"} {
		mkdirAll(t, h.volumeDir("p", name))
	}
	writeFile(t, h.devicePath("p", "dev"), "")
	h.start(t)
	waitFor(t, "the actual state rebuilt", h.r.Recovered)
	if want := [][]string{{h.volumeDir("p", "plain"), h.volumeDir("p", "ro"), h.volumeDir("p", "rw")}}; !slices.EqualFunc(asked, want, slices.Equal) {
		t.Errorf("mount table asked about %q, want %q", asked, want)
	}
	for name, want := range map[string]asw.Access{"ro": asw.ReadOnly, "rw": asw.ReadWrite, "plain": asw.AccessUnknown, "dev": asw.AccessUnknown} {
		if v, _ := h.actualVolume("p", name); v.Access != want {
			t.Errorf("found volume %s has access %d, want %d", name, v.Access, want)
		}
	}

	readOnly := func(name string) dsw.Volume {
		v := desiredVolume(name, "1")
		v.ReadOnly = true
		return v
	}
	h.desired.SetPod(desiredPod("p", readOnly("ro"), readOnly("rw"), readOnly("plain")))
	for _, name := range []string{"ro", "plain"} {
		if v := h.waitMounted(t, "p", name, "1"); v.Access != asw.ReadOnly {
			t.Errorf("%s set up again with access %d, want ReadOnly", name, v.Access)
		}
	}
	if v, _ := h.actualVolume("p", "rw"); v.State != asw.Uncertain || v.Access != asw.ReadWrite {
		t.Errorf("volume found mounted writable, now wanted readOnly = %+v; want it kept as found", v)
	}
	for _, call := range h.plugin.callsOf("setup") {
		if strings.HasSuffix(call, "/rw") {
			t.Errorf("the volume found mounted writable was set up again for a readOnly spec: %v", h.plugin.callsOf("setup"))
		}
	}
}

// TestReconstructFailsWithoutReadOnlyMounts: a mount table that cannot be
// read fails the start: set up again, a volume whose mount is not known
// would be shown as its spec asks.
func TestReconstructFailsWithoutReadOnlyMounts(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.MountedReadOnly = func(context.Context, []string) (map[string]bool, error) { return nil, errors.New("injected") }
	})
	mkdirAll(t, h.volumeDir("p", "v"))
	err := h.r.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "read-only") || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Run = %v; want the reconstruction to fail, saying why", err)
	}
	if h.r.Recovered() {
		t.Error("recovered without knowing how the volumes found are mounted")
	}
}

// Without volumes on disk the mount table is not read.
func TestReconstructOfNothingReadsNoMountTable(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.MountedReadOnly = func(context.Context, []string) (map[string]bool, error) {
			t.Error("mount table read with no volume on disk")
			return nil, nil
		}
	})
	writeFile(t, h.devicePath("p", "dev"), "")
	h.start(t)
	waitFor(t, "the actual state rebuilt", h.r.Recovered)
}

// TestStoppedDuringReconstructIsNoFailure: a SIGTERM while the mount table
// is read at start ends Run without an error (the agent exits 0), changes
// nothing and does not claim to have recovered.
func TestStoppedDuringReconstructIsNoFailure(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	h := newHarness(t, func(c *Config) {
		c.MountedReadOnly = func(ctx context.Context, _ []string) (map[string]bool, error) {
			cancel() // the stop arrives while the table is read
			<-ctx.Done()
			return nil, fmt.Errorf("gave up waiting for storage: %w", ctx.Err())
		}
	})
	mkdirAll(t, h.volumeDir("p", "v"))
	if err := h.r.Run(ctx); err != nil {
		t.Fatalf("Run stopped during the reconstruction = %v; want nil", err)
	}
	if h.r.Recovered() {
		t.Error("recovered without having read the mount table")
	}
	if _, err := os.Stat(h.volumeDir("p", "v")); err != nil {
		t.Errorf("the volume found on disk: %v; want it left as it was", err)
	}
}
