package mount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestTmpfsOptions(t *testing.T) {
	for _, tc := range []struct {
		name   string
		noSwap bool
		opts   []string
		want   []string
	}{
		{"noswap added last", true, []string{"mode=0755"}, []string{"mode=0755", "noswap"}},
		{"kernel without noswap", false, []string{"mode=0755"}, []string{"mode=0755"}},
		{"no other option", true, nil, []string{"noswap"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Tmpfs(tc.noSwap, tc.opts...)
			if m.Type != "tmpfs" || m.Source != "tmpfs" || !slices.Equal(m.Options, tc.want) {
				t.Errorf("Tmpfs(%v, %q) = %v, want tmpfs with %q", tc.noSwap, tc.opts, m, tc.want)
			}
			if _, err := parseOptions(m); err != nil {
				t.Errorf("options of %v refused: %v", m, err)
			}
		})
	}
}

func TestTmpfsDoesNotShareTheCallersOptions(t *testing.T) {
	opts := make([]string, 1, 4)
	opts[0] = "mode=0755"
	_ = Tmpfs(true, opts...)
	if got := opts[:2][1]; got != "" {
		t.Errorf("Tmpfs wrote %q into the caller's slice", got)
	}
}

func TestHasNoSwap(t *testing.T) {
	for opts, want := range map[string]bool{
		"rw,size=4k,mode=700,noswap":  true,
		"rw,noswap,size=4k":           true,
		"rw,size=4k,mode=700":         false,
		"rw,size=4k,mode=700,noswapx": false,
		"":                            false,
	} {
		if got := hasNoSwap(opts); got != want {
			t.Errorf("hasNoSwap(%q) = %v, want %v", opts, got, want)
		}
	}
}

// TestProbeNoSwap probes this machine's kernel: it must agree with a mount
// made by hand, and leave nothing behind.
func TestProbeNoSwap(t *testing.T) {
	needRoot(t)
	tmp := t.TempDir()
	err := ProbeNoSwap(tmp)
	target := t.TempDir()
	byHand := unix.Mount("tmpfs", target, "tmpfs", 0, "size=4k,noswap")
	if byHand == nil {
		if err := unix.Unmount(target, 0); err != nil {
			t.Fatal(err)
		}
	}
	switch {
	case byHand == nil && err != nil:
		t.Errorf("ProbeNoSwap = %v on a kernel that mounts a tmpfs with noswap", err)
	case byHand != nil && !errors.Is(err, ErrNoSwapUnsupported):
		t.Errorf("ProbeNoSwap = %v on a kernel that refuses noswap (%v), want ErrNoSwapUnsupported", err, byHand)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("the probe left %d entries in its temporary directory", len(left))
	}
}

func TestNoSwapUnder(t *testing.T) {
	needRoot(t)
	if err := ProbeNoSwap(""); err != nil {
		t.Skipf("this kernel cannot mount a tmpfs with noswap: %v", err)
	}
	root := t.TempDir()
	with, without, bind := filepath.Join(root, "with"), filepath.Join(root, "without"), filepath.Join(root, "bind")
	for _, m := range []struct {
		dir string
		m   Mount
	}{
		{with, Tmpfs(true)},
		{without, Tmpfs(false)},
		{bind, Mount{Type: "none", Source: t.TempDir(), Options: []string{"bind"}}},
	} {
		if err := os.Mkdir(m.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := (System{}).Mount(context.Background(), m.m, m.dir); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(m.dir, unix.MNT_DETACH) })
	}
	got, err := NoSwapUnder(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{with: true, without: false}
	if len(got) != len(want) || got[with] != true || got[without] != false {
		t.Errorf("NoSwapUnder = %v, want %v (a bind mount is not a tmpfs)", got, want)
	}
}
