package local

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
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
