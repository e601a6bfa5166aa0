package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
)

// linkRun is a volume and, outside it, a root-only file that a pod holds
// a hard link to: the walk must never change that file.
type linkRun struct {
	vol, outside string
	secret       string // the file outside
}

func newLinkRun(t *testing.T) *linkRun {
	t.Helper()
	base := scratchFS(t)
	r := &linkRun{vol: filepath.Join(base, "vol"), outside: filepath.Join(base, "outside")}
	r.secret = filepath.Join(r.outside, "secret")
	mkdir(t, r.vol, 0o755)
	mkdir(t, r.outside, 0o700)
	writeMode(t, r.secret, 0o600)
	return r
}

// TestOwnershipNeverCountsItsWayOut: a pod holding a hard link to a file
// outside the volume adds links to it ahead of the walk and removes those
// the walk has counted, so that the walk's count of the links it found
// reaches the file's link count while the link outside is still there.
// The file outside keeps its group and modes. The report hook places
// every step: the volume holds two directories with nothing else, so the
// walk visits the top (entry 1), a directory (2), its link (3), the other
// directory (4), its link (5), whichever directory comes first.
func TestOwnershipNeverCountsItsWayOut(t *testing.T) {
	r := newLinkRun(t)
	dirs := []string{filepath.Join(r.vol, "d1"), filepath.Join(r.vol, "d2")}
	for _, d := range dirs {
		mkdir(t, d, 0o755)
	}
	before := owners(t, r.outside)
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = time.Nanosecond // a report at every entry
	skipped, err := setOwnership(t.Context(), r.vol, testGID, v1.FSGroupChangeAlways, func(n int, _ time.Duration, done bool) {
		switch {
		case done:
		case n == 1: // ahead of the walk: a link in each directory
			for _, d := range dirs {
				if err := os.Link(r.secret, filepath.Join(d, "l")); err != nil {
					t.Error(err)
				}
			}
		case n == 4: // the first directory's link is counted: remove it
			for _, d := range dirs {
				if gidOf(t, d) == testGID {
					if err := os.Remove(filepath.Join(d, "l")); err != nil {
						t.Error(err)
					}
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	checkSameOwners(t, before, owners(t, r.outside))
	if skipped != 2 {
		t.Errorf("%d entries reported left alone; want 2", skipped)
	}
}

// TestOwnershipUnderLinkChurn: while the walk runs, again and again with a
// new group each time, goroutines link the root-only file outside into
// the volume and unlink it as fast as they can, some keeping one link
// (its link count goes 1, 2, 1: the walk can open the link in the volume
// and find the count of the one outside), some several at once; nothing
// outside ever changes. (Timing decides where the links come and go;
// TestOwnershipNeverCountsItsWayOut and TestOwnershipLinkGoneBeforeTheCheck
// place them.)
func TestOwnershipUnderLinkChurn(t *testing.T) {
	r := newLinkRun(t)
	for _, d := range []string{"a", "b", "c", "d"} {
		mkdir(t, filepath.Join(r.vol, d), 0o755)
		for _, f := range []string{"1", "2", "3"} {
			writeMode(t, filepath.Join(r.vol, d, f), 0o644)
		}
	}
	before := owners(t, r.outside)
	var stop atomic.Bool
	var flips atomic.Int64
	var wg sync.WaitGroup
	churn := func(links ...string) {
		defer wg.Done()
		for !stop.Load() {
			for _, l := range links {
				if err := os.Link(r.secret, l); err != nil {
					t.Error(err)
					return
				}
			}
			for _, l := range links {
				if err := os.Remove(l); err != nil {
					t.Error(err)
					return
				}
			}
			flips.Add(1)
		}
	}
	wg.Add(3)
	go churn(filepath.Join(r.vol, "a", "l"))
	go churn(filepath.Join(r.vol, "b", "l"))
	go churn(filepath.Join(r.vol, "c", "l"), filepath.Join(r.vol, "d", "l"), filepath.Join(r.vol, "l"))
	const walks = 3000
	for i := range walks {
		if _, err := setOwnership(t.Context(), r.vol, int64(testGID+i%7), v1.FSGroupChangeAlways, nil); err != nil {
			t.Errorf("walk %d: %v", i, err)
		}
		if o := owners(t, r.outside)[r.secret]; o != before[r.secret] {
			t.Errorf("after walk %d of %d: the file outside is %+v, was %+v", i+1, walks, o, before[r.secret])
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d link flips during the walks", flips.Load())
	checkSameOwners(t, before, owners(t, r.outside))
}

// linkOf reports the group and mode of p, not following a symlink.
func linkOf(t *testing.T, p string) (uint32, uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Gid, st.Mode & 0o7777
}

// TestOwnershipLinkGoneBeforeTheCheck: the pod removes the link the walk
// opened, between the walk's open and its stat, so that the stat finds
// the link count of the one link outside; and, in some cases, puts a link
// back under the same name after the stat, so that a second look by name
// finds the file there again. The file outside keeps its group and modes,
// in a shallow directory and in one whose path is longer than PATH_MAX.
func TestOwnershipLinkGoneBeforeTheCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		deep   bool
		relink bool
	}{
		{"removed", false, false},
		{"removed and linked again", false, true},
		{"deep, removed", true, false},
		{"deep, removed and linked again", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newLinkRun(t)
			dir, err := unix.Open(r.vol, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			if tc.deep {
				unix.Close(dir)
				dir = openDeep(t, r.vol, 2100, true)
			}
			err = unix.Linkat(unix.AT_FDCWD, r.secret, dir, "l", 0)
			unix.Close(dir)
			if err != nil {
				t.Fatal(err)
			}
			before := owners(t, r.outside)
			visits := 0
			testHook = func(step string, dirfd int, name string) {
				if name != "l" {
					return
				}
				visits++
				switch {
				case step == "opened":
					err = unix.Unlinkat(dirfd, "l", 0)
				case step == "stated" && tc.relink:
					err = unix.Linkat(unix.AT_FDCWD, r.secret, dirfd, "l", 0)
				}
				if err != nil {
					t.Errorf("%s: %v", step, err)
				}
			}
			defer func() { testHook = nil }()
			if _, err := setOwnership(t.Context(), r.vol, testGID, v1.FSGroupChangeAlways, nil); err != nil {
				t.Fatal(err)
			}
			if visits != 2 {
				t.Errorf("the hook saw %d steps of the link's visit; want 2", visits)
			}
			checkSameOwners(t, before, owners(t, r.outside))
		})
	}
}

// TestOwnershipWholeFileSystem: a volume that is a whole file system (an
// ext4 root, a btrfs subvolume) has no link outside it: its files with
// several links are changed, as the kubelet does. A directory below the
// root of the same file system is not a whole file system: there they are
// left alone.
func TestOwnershipWholeFileSystem(t *testing.T) {
	for _, fsType := range []string{"ext4", "btrfs"} {
		t.Run(fsType, func(t *testing.T) {
			m := mountNewFS(t, fsType)
			vol := m
			if fsType == "btrfs" {
				vol = filepath.Join(m, "subvolume")
				if out, err := exec.Command("btrfs", "subvolume", "create", vol).CombinedOutput(); err != nil {
					t.Fatalf("btrfs subvolume create: %v: %s", err, out)
				}
			}
			for _, d := range []string{vol, filepath.Join(vol, "below")} {
				mkdir(t, filepath.Join(d, "sub"), 0o755)
				writeMode(t, filepath.Join(d, "a"), 0o600)
				if err := os.Link(filepath.Join(d, "a"), filepath.Join(d, "sub", "a2")); err != nil {
					t.Fatal(err)
				}
			}
			below := filepath.Join(vol, "below")
			skipped, err := setOwnership(t.Context(), below, testGID, v1.FSGroupChangeAlways, nil)
			if err != nil || skipped != 2 {
				t.Errorf("walk of a directory below the root: %d entries left alone, %v; want 2", skipped, err)
			}
			if gid, mode := linkOf(t, filepath.Join(below, "a")); gid != 0 || mode != 0o600 {
				t.Errorf("below the root, a file with two links: gid %d mode %04o; want it left alone", gid, mode)
			}
			skipped, err = setOwnership(t.Context(), vol, testGID+1, v1.FSGroupChangeAlways, nil)
			if err != nil || skipped != 0 {
				t.Errorf("walk of the whole file system: %d entries left alone, %v; want none", skipped, err)
			}
			for _, f := range []string{"a", "sub/a2", "below/a"} {
				if gid, mode := linkOf(t, filepath.Join(vol, f)); gid != testGID+1 || mode != 0o660 {
					t.Errorf("%s: gid %d mode %04o; want %d 0660", f, gid, mode, testGID+1)
				}
			}
		})
	}
}

// mountNewFS makes a file system of fsType on a sparse image of its own,
// mounts it for the test and returns where.
func mountNewFS(t *testing.T, fsType string) string {
	t.Helper()
	plugintest.NeedRoot(t, "attaches a loop device and mounts it")
	if _, err := exec.LookPath("mkfs." + fsType); err != nil {
		t.Skipf("no mkfs.%s", fsType)
	}
	img := filepath.Join(t.TempDir(), "fs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 256<<20); err != nil { // btrfs wants more than 109 MiB
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs."+fsType, "-q", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.%s: %v: %s", fsType, err, out)
	}
	m := t.TempDir()
	if out, err := exec.Command("mount", "-o", "loop", img, m).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v: %s", err, out)
	}
	t.Cleanup(func() { plugintest.UnmountAll(t, m) })
	return m
}
