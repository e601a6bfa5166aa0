package subpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/subpath/subpathtest"
)

// outside makes a host directory no subPath may reach, and returns it
// with a listing to compare against.
func outside(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	plugintest.WriteFile(t, filepath.Join(dir, "secret"), "host data")
	return dir, listing(t, dir)
}

func listing(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		out = append(out, p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(out)
}

// TestCVE2017_1002101_SubPathSymlinkNeverMountsOutside: CVE-2017-1002101
// was the kubelet following a symlink a container had made in its volume
// when it bind-mounted a subPath, so the container got any host path.
// Symlinks planted at every place of a subPath (first element, middle,
// last, relative and absolute, to a directory and to a file, and one that
// would make a missing directory outside) are refused: no mount, nothing
// made outside. (A link that stays inside the volume is followed, as by
// the kubelet: TestPrepareFollowsLinksInsideTheVolume.) A missing
// directory is never made through a link, even one inside.
func TestCVE2017_1002101_SubPathSymlinkNeverMountsOutside(t *testing.T) {
	p, vol := setup(t)
	out, before := outside(t)
	plugintest.WriteFile(t, filepath.Join(vol, "a/b/file"), "pod data")
	links := map[string]string{
		"out": out, "a/up": "../../" + filepath.Base(out), "a/root": "/", "a/b/host": filepath.Join(out, "secret"),
		"a/self": ".", "a/loop": "loop",
	}
	for link, to := range links {
		if err := os.Symlink(to, filepath.Join(vol, link)); err != nil {
			t.Fatal(err)
		}
	}
	for i, sub := range []string{"out", "out/secret", "out/new/dir", "a/up", "a/root/etc", "a/b/host", "a/self/new", "a/loop", "a/b/host/x", "a/up/x"} {
		o, err := p.Prepare(t.Context(), uid, "data", vol, []Want{{Container: "c", Index: i, Path: sub}})
		if !errors.Is(err, ErrEscape) {
			t.Errorf("subPath %q: %v, want ErrEscape", sub, err)
		}
		if o.Mounts[0].Path != "" {
			t.Errorf("subPath %q: prepared at %s", sub, o.Mounts[0].Path)
		}
		if mounted, _ := p.Mounter.IsMountPoint(t.Context(), p.Target(uid, "data", "c", i)); mounted {
			t.Errorf("subPath %q: a mount was made", sub)
		}
	}
	if after := listing(t, out); after != before {
		t.Errorf("outside the volume: %s, was %s", after, before)
	}
}

// TestCVE2021_25741_SubPathSwapRaceNeverMountsOutside: CVE-2021-25741 was
// a container swapping a checked subPath directory for a symlink between
// the kubelet's check and its mount. A racer swaps a directory of the
// subPath (the middle element, and the last) for a symlink to the host
// without pause while the subPath is prepared again and again: every
// mount made shows the directory inside the volume (by file identity and
// by the kernel's mount table), never the host's.
func TestCVE2021_25741_SubPathSwapRaceNeverMountsOutside(t *testing.T) {
	p, vol := setup(t)
	out, before := outside(t)
	plugintest.WriteFile(t, filepath.Join(vol, "victim/inner/file"), "pod data")
	stop := racer(t, vol, "victim", out)
	const rounds = 400
	mounted := 0
	for i := range rounds {
		sub := []string{"victim/inner", "victim"}[i%2]
		o, err := p.Prepare(t.Context(), uid, "data", vol, []Want{{Container: "c", Path: sub}})
		if err != nil {
			if !errors.Is(err, ErrEscape) && !errors.Is(err, os.ErrNotExist) {
				t.Logf("round %d: %v", i, err) // the racer moves things: failures are fine, escapes are not
			}
			continue
		}
		target := o.Mounts[0].Path
		if err := subpathtest.Inside(target, vol); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if _, err := os.Stat(filepath.Join(target, "secret")); err == nil {
			t.Fatalf("round %d: the host directory is mounted at %s", i, target)
		}
		mounted++
		if err := p.RemovePod(t.Context(), uid); err != nil {
			t.Fatal(err)
		}
	}
	n := stop()
	if n == 0 || mounted == 0 || mounted == rounds {
		t.Fatalf("%d swaps, %d mounts in %d rounds: the race never ran", n, mounted, rounds)
	}
	t.Logf("%d swaps, %d mounts in %d rounds", n, mounted, rounds)
	if after := listing(t, out); after != before {
		t.Errorf("outside the volume: %s, was %s", after, before)
	}
}

// racer swaps dir/name for a symlink to target and back until stopped,
// each time in one atomic exchange (renameat2 RENAME_EXCHANGE), so that
// the directory is never missing (the preparation would make it anew);
// stop returns the number of swaps.
func racer(t *testing.T, dir, name, target string) (stop func() int) {
	t.Helper()
	victim, link := filepath.Join(dir, name), filepath.Join(dir, name+".link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	var (
		swaps atomic.Int64
		done  = make(chan struct{})
		wg    sync.WaitGroup
		once  sync.Once
	)
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if unix.Renameat2(unix.AT_FDCWD, victim, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE) != nil {
				t.Error("the racer could not swap")
				return
			}
			swaps.Add(1)
		}
	})
	return func() int {
		once.Do(func() { close(done); wg.Wait() })
		return int(swaps.Load())
	}
}
