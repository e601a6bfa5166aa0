package contentdir_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/volume-agent/volume-agent/internal/atomicwriter"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/contentdir"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/volume"
)

func TestSetUpRollbackIsBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := &plugintest.TimedOutMounter{Fake: &mount.Fake{}, T: t, Cancel: cancel}
	dir := plugintest.VolumeDir(t)
	payload := contentdir.Payload{"key": atomicwriter.File{Data: []byte("v"), Mode: 0o644}}
	_, err := contentdir.Dir{Mounter: m, Memory: true}.SetUp(ctx, dir, payload)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("SetUp = %v, want the mount's context.Canceled", err)
	}
	if got := m.Calls(); len(got) != 1 || got[0] != "unmount "+dir {
		t.Errorf("rollback calls = %q, want an unmount of the uncertain mount", got)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the directory SetUp created was not rolled back: Lstat = %v", err)
	}
}

// TestSwap: the tmpfs of a memory-backed volume has noswap when the kernel
// supports it, and SetUp says which it mounted; a set-up that mounts
// nothing (on disk, mounted before, unprivileged) cannot say.
func TestSwap(t *testing.T) {
	payload := contentdir.Payload{"key": atomicwriter.File{Data: []byte("v"), Mode: 0o644}}
	for _, tc := range []struct {
		name        string
		memory      bool
		noSwap      bool
		wantOptions []string // nil: no mount
		wantSwap    volume.Swap
	}{
		{"memory, kernel with noswap", true, true, []string{"mode=0755", "noswap"}, volume.SwapNever},
		{"memory, kernel without noswap", true, false, []string{"mode=0755"}, volume.SwapAllowed},
		{"on disk", false, true, nil, volume.SwapUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &mount.Fake{}
			d := contentdir.Dir{Mounter: f, Memory: tc.memory, NoSwap: tc.noSwap}
			dir := plugintest.VolumeDir(t)
			swap, err := d.SetUp(context.Background(), dir, payload)
			if err != nil {
				t.Fatal(err)
			}
			m, mounted := f.Mounted(dir)
			if mounted != (tc.wantOptions != nil) || !slices.Equal(m.Options, tc.wantOptions) {
				t.Errorf("mount = %v (%v), want options %q", m, mounted, tc.wantOptions)
			}
			if swap != tc.wantSwap {
				t.Errorf("swap = %v, want %v", swap, tc.wantSwap)
			}
			if swap, err = d.SetUp(context.Background(), dir, payload); err != nil || swap != volume.SwapUnknown {
				t.Errorf("SetUp again = %v, %v; want SwapUnknown: the mount is not made again", swap, err)
			}
		})
	}
}

func TestSwapUnprivileged(t *testing.T) {
	d := contentdir.Dir{Mounter: mount.Unprivileged{}, Memory: true, NoSwap: true}
	payload := contentdir.Payload{"key": atomicwriter.File{Data: []byte("v"), Mode: 0o644}}
	if swap, err := d.SetUp(context.Background(), plugintest.VolumeDir(t), payload); err != nil || swap != volume.SwapUnknown {
		t.Errorf("SetUp = %v, %v; want SwapUnknown: nothing is mounted", swap, err)
	}
}

// TestSetUpWritesOnlyANewDirectoryFresh: the set-up that makes the volume
// directory (and mounts its tmpfs) writes it with the fresh writer; a
// set-up of a directory that exists (a refresh, a restart) uses the full
// one, which finds and removes what an earlier write left.
func TestSetUpWritesOnlyANewDirectoryFresh(t *testing.T) {
	for _, memory := range []bool{false, true} {
		t.Run(map[bool]string{false: "disk", true: "memory"}[memory], func(t *testing.T) {
			d := contentdir.Dir{Mounter: &mount.Fake{}, Memory: memory}
			dir := plugintest.VolumeDir(t)
			before := contentdir.FreshWrites()
			payload := contentdir.Payload{"key": atomicwriter.File{Data: []byte("v1"), Mode: 0o644}}
			if _, err := d.SetUp(context.Background(), dir, payload); err != nil {
				t.Fatal(err)
			}
			if got := contentdir.FreshWrites() - before; got != 1 {
				t.Fatalf("fresh writes of a new directory = %d, want 1", got)
			}
			// A crash's leftover beside the live payload: only the full
			// writer removes it.
			stale := filepath.Join(dir, "..2020_01_02_03_04_05.42")
			if err := os.Mkdir(stale, 0o755); err != nil {
				t.Fatal(err)
			}
			payload["key"] = atomicwriter.File{Data: []byte("v2"), Mode: 0o644}
			if _, err := d.SetUp(context.Background(), dir, payload); err != nil {
				t.Fatal(err)
			}
			if got := contentdir.FreshWrites() - before; got != 1 {
				t.Fatalf("fresh writes after a set-up of the existing directory = %d, want still 1", got)
			}
			if _, err := os.Lstat(stale); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the full writer left the stale payload directory: Lstat = %v", err)
			}
			if data, err := os.ReadFile(filepath.Join(dir, "key")); err != nil || string(data) != "v2" {
				t.Errorf("key = %q, %v; want v2", data, err)
			}
		})
	}
}
