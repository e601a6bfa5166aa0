package local

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
)

// swapKind is what a swap puts where an entry of the volume was.
type swapKind int

const (
	dirToSymlink  swapKind = iota // a directory becomes a symlink to a root-only directory outside
	fileToSymlink                 // a file becomes a symlink to a root-only file outside
	dirToBind                     // a directory gets a bind mount of a root-only directory outside
)

// swapRun is a volume of thousands of entries and a tree outside it that
// the walk must leave exactly as it was.
type swapRun struct {
	vol       string
	outside   string // everything below is compared before and after
	graveyard string // where swapped-out entries go, outside both
	kind      swapKind
	swapped   map[string]bool // guarded by the walk waiting for the swapper
}

func newSwapRun(t *testing.T, kind swapKind) *swapRun {
	t.Helper()
	plugintest.NeedRoot(t, "changes groups and bind-mounts")
	base := scratchFS(t)
	r := &swapRun{
		vol:       filepath.Join(base, "vol"),
		outside:   filepath.Join(base, "outside"),
		graveyard: filepath.Join(base, "graveyard"),
		kind:      kind,
		swapped:   map[string]bool{},
	}
	mkdir(t, r.graveyard, 0o700)
	mkdir(t, filepath.Join(r.outside, "secret"), 0o700)
	writeMode(t, filepath.Join(r.outside, "secret", "key"), 0o600)
	writeMode(t, filepath.Join(r.outside, "shadow"), 0o600)
	mkdir(t, r.vol, 0o755)
	for i := range 20 {
		for j := range 10 {
			d := filepath.Join(r.vol, "d"+strconv.Itoa(i), "s"+strconv.Itoa(j))
			mkdir(t, d, 0o755)
			for k := range 10 {
				writeMode(t, filepath.Join(d, "f"+strconv.Itoa(k)), 0o644)
			}
		}
	}
	return r
}

// walk runs the ownership change over the volume. Every `every` entries
// its report hook asks a concurrent goroutine to swap one entry that the
// walk has listed (its directory has been changed, so read) but not yet
// visited, and waits until it has: the swap lands between the walk's
// readdir and its visit, every time. It returns how many entries the walk
// visited after the last swap.
func (r *swapRun) walk(t *testing.T, every int) (after int, err error) {
	t.Helper()
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = time.Nanosecond // a report at every entry
	req, done := make(chan struct{}), make(chan bool)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range req {
			done <- r.swapOne(t)
		}
	}()
	next, last, total := every, 0, 0
	err = walk(t, r.vol, func(n int, _ time.Duration, finished bool) {
		total = n
		if finished || n < next {
			return
		}
		next += every
		req <- struct{}{}
		if <-done {
			last = n
		}
	})
	close(req)
	wg.Wait()
	return total - last, err
}

// swapOne swaps the first entry of the right type that the walk has
// listed and not visited; it reports whether it found one.
func (r *swapRun) swapOne(t *testing.T) bool {
	victim := r.listedNotVisited(t)
	if victim == "" {
		return false
	}
	var err error
	switch r.kind {
	case dirToSymlink, fileToSymlink:
		target := filepath.Join(r.outside, "secret")
		if r.kind == fileToSymlink {
			target = filepath.Join(r.outside, "shadow")
		}
		err = os.Rename(victim, filepath.Join(r.graveyard, strconv.Itoa(len(r.swapped))))
		if err == nil {
			err = os.Symlink(target, victim)
		}
	case dirToBind:
		err = unix.Mount(filepath.Join(r.outside, "secret"), victim, "", unix.MS_BIND, "")
	}
	if err != nil {
		t.Errorf("swap %s: %v", victim, err)
		return false
	}
	r.swapped[victim] = true
	return true
}

// listedNotVisited finds an entry of the kind's type that still has its
// old group below a directory that already has the new one.
func (r *swapRun) listedNotVisited(t *testing.T) string {
	var found string
	err := filepath.WalkDir(r.vol, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case r.swapped[p] && d.IsDir():
			return fs.SkipDir // a bind mount
		case r.swapped[p] || p == r.vol || found != "":
			return nil
		}
		wantDir := r.kind != fileToSymlink
		if d.IsDir() != wantDir || (!wantDir && !d.Type().IsRegular()) {
			return nil
		}
		if gidOf(t, p) != testGID && gidOf(t, filepath.Dir(p)) == testGID {
			found = p
			return fs.SkipAll
		}
		return nil
	})
	if err != nil {
		t.Errorf("look for an entry to swap: %v", err)
	}
	return found
}

// TestOwnershipNeverFollowsASwappedEntry: something writing to the volume
// replaces entries the walk has listed but not reached yet, many times
// during one walk; nothing outside the volume changes, the swapped
// symlinks are re-owned themselves (so the walk did reach them after the
// swap), and the rest of the volume is changed as usual.
func TestOwnershipNeverFollowsASwappedEntry(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind swapKind
	}{
		{"directory to symlink", dirToSymlink},
		{"file to symlink", fileToSymlink},
		{"directory to bind mount", dirToBind},
	} {
		t.Run(tc.name, func(t *testing.T) { checkSwaps(t, tc.kind) })
		t.Run(tc.name+", chmod through /proc", func(t *testing.T) {
			defer func(was bool) { noFchmodat2.Store(was) }(noFchmodat2.Load())
			noFchmodat2.Store(true)
			checkSwaps(t, tc.kind)
		})
	}
}

// checkSwaps walks a volume while entries of kind are swapped in it, and
// checks the walk and everything around it.
func checkSwaps(t *testing.T, kind swapKind) {
	r := newSwapRun(t, kind)
	before := owners(t, r.outside)
	after, err := r.walk(t, 97)
	if err != nil {
		t.Fatalf("walk: %v", err)
	}
	t.Logf("%d swaps during the walk, %d entries visited after the last", len(r.swapped), after)
	if len(r.swapped) < 10 || after == 0 {
		t.Fatalf("%d swaps, %d entries visited after the last; want swaps repeated in mid-walk", len(r.swapped), after)
	}
	checkSameOwners(t, before, owners(t, r.outside))
	for p := range r.swapped {
		if r.kind != dirToBind && gidOf(t, p) != testGID {
			t.Errorf("swapped %s: not re-owned, so the walk never reached it after the swap", p)
		}
	}
	checkVolumeOwned(t, r.vol, r.swapped)
}

// scratchFS returns a fresh directory on a tmpfs of its own, mounted for
// the test: building trees of thousands of entries there takes
// milliseconds, not seconds. Everything in it is on one file system, so
// a bind mount there has the same device number as its source.
func scratchFS(t *testing.T) string {
	t.Helper()
	plugintest.NeedRoot(t, "mounts a tmpfs")
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { plugintest.UnmountAll(t, dir) })
	return dir
}

// testGID is the fsGroup the tests give volumes.
const testGID = 4321

type owner struct {
	mode     fs.FileMode
	uid, gid uint32
}

// owners lists mode, owner and group of every entry at and below dir.
func owners(t *testing.T, dir string) map[string]owner {
	t.Helper()
	m := map[string]owner{}
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		m[p] = owner{fi.Mode(), st.Uid, st.Gid}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func checkSameOwners(t *testing.T, before, after map[string]owner) {
	t.Helper()
	for p, o := range before {
		if after[p] != o {
			t.Errorf("outside the volume, %s changed: %+v, was %+v", p, after[p], o)
		}
	}
	if len(after) != len(before) {
		t.Errorf("outside the volume, %d entries, were %d", len(after), len(before))
	}
}

// checkVolumeOwned checks that every entry of the volume but those in
// except has the group and the modes.
func checkVolumeOwned(t *testing.T, vol string, except map[string]bool) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(vol, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case except[p] && d.IsDir():
			return fs.SkipDir
		case except[p]:
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(groupRW)
		if d.IsDir() {
			want |= groupExec | fs.ModeSetgid
		}
		if gid := fi.Sys().(*syscall.Stat_t).Gid; gid != testGID || fi.Mode()&want != want {
			if n++; n <= 5 {
				t.Errorf("%s: gid %d mode %v; want gid %d and at least %v", p, gid, fi.Mode(), testGID, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n > 5 {
		t.Errorf("... and %d more entries not changed", n-5)
	}
}

func gidOf(t *testing.T, p string) uint32 {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		if !errors.Is(err, unix.ENOENT) {
			t.Errorf("lstat %s: %v", p, err)
		}
		return 0
	}
	return st.Gid
}

// mkdir makes the directory p and its parents, and gives p mode (with
// setuid, setgid and sticky bits as chmod(2) takes them).
func mkdir(t *testing.T, p string, mode uint32) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// writeMode writes the file p and gives it mode, as mkdir does.
func writeMode(t *testing.T, p string, mode uint32) {
	t.Helper()
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// TestOwnershipUnderConstantSwaps: while the walk runs, again and again
// with a new group each time, a goroutine swaps a directory and a file of
// the volume for symlinks to root-only entries outside, and back, as fast
// as it can; nothing outside the volume ever changes. (Timing decides where
// the swaps land; TestOwnershipNeverFollowsASwappedEntry places them.)
func TestOwnershipUnderConstantSwaps(t *testing.T) {
	r := newSwapRun(t, dirToSymlink)
	before := owners(t, r.outside)
	stop := make(chan struct{})
	flips := 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		dir, file := filepath.Join(r.vol, "d7"), filepath.Join(r.vol, "d3", "s3", "f3")
		for {
			select {
			case <-stop:
				return
			default:
			}
			flip(t, dir, filepath.Join(r.outside, "secret"))
			flip(t, file, filepath.Join(r.outside, "shadow"))
			flips++
		}
	}()
	for i := range 5 {
		if _, err := setOwnership(t.Context(), r.vol, int64(testGID+i), v1.FSGroupChangeAlways, nil); err != nil {
			t.Errorf("walk %d: %v", i, err)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d flips during 5 walks", flips)
	checkSameOwners(t, before, owners(t, r.outside))
}

// flip swaps p for a symlink to target and back.
func flip(t *testing.T, p, target string) {
	away := p + ".away"
	for _, err := range []error{os.Rename(p, away), os.Symlink(target, p), os.Remove(p), os.Rename(away, p)} {
		if err != nil {
			t.Errorf("flip %s: %v", p, err)
		}
	}
}
