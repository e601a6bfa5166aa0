package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// TestOwnershipReportsProgress: a walk longer than progressEvery reports
// the entries changed so far while it runs, and once more when done.
func TestOwnershipReportsProgress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another group needs root")
	}
	dir := t.TempDir()
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(dir, string(rune('a'+i))), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = time.Nanosecond // every entry is past the next report
	type call struct {
		entries int
		done    bool
	}
	var calls []call
	_, err := setOwnership(context.Background(), dir, 4321, v1.FSGroupChangeAlways, func(n int, _ time.Duration, done bool) { calls = append(calls, call{n, done}) })
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) < 2 || calls[len(calls)-1] != (call{6, true}) || calls[len(calls)-2].done {
		t.Errorf("reports = %+v; want progress, then done with 6 entries", calls)
	}
}

// TestOwnershipDeepTree: a tree deeper than a path can name is changed
// all the way down, with a bounded number of open descriptors.
func TestOwnershipDeepTree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another group needs root")
	}
	const depth = 2100 // "d/" × 2100 is longer than PATH_MAX
	vol := scratchFS(t)
	fd := openDeep(t, vol, depth, true)
	unix.Close(fd)
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = time.Nanosecond
	base, most := openFDs(t), 0
	err := walk(t, vol, func(int, time.Duration, bool) { most = max(most, openFDs(t)) })
	if err != nil {
		t.Fatalf("walk: %v", err)
	}
	if most-base > 3 { // a descriptor per level would be thousands
		t.Errorf("%d descriptors open during the walk, %d before; want at most 3 more", most, base)
	}
	fd = openDeep(t, vol, depth, false)
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstatat(fd, "f", &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	if st.Gid != testGID || st.Mode&0o7777 != 0o660 {
		t.Errorf("the file at depth %d: gid %d mode %o; want %d 0660", depth, st.Gid, st.Mode&0o7777, testGID)
	}
}

// openDeep opens the directory depth levels of "d" below dir, making
// them (and a file "f" at the bottom) when create is set, and checking
// on the way down, when not, that each has the group and modes.
func openDeep(t *testing.T, dir string, depth int, create bool) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range depth {
		if create {
			if err := unix.Mkdirat(fd, "d", 0o700); err != nil {
				t.Fatal(err)
			}
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatalf("open at depth %d: %v", i, err)
		}
		fd = next
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		if !create && (st.Gid != testGID || st.Mode&0o7777 != 0o2770) {
			t.Fatalf("directory at depth %d: gid %d mode %o; want %d 02770", i+1, st.Gid, st.Mode&0o7777, testGID)
		}
	}
	if create {
		f, err := unix.Openat(fd, "f", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(f)
	}
	return fd
}

func openFDs(t *testing.T) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// walk is the tests' one call of setOwnership, with policy Always.
func walk(t *testing.T, dir string, report func(int, time.Duration, bool)) error {
	t.Helper()
	_, err := setOwnership(context.Background(), dir, testGID, v1.FSGroupChangeAlways, report)
	return err
}

// TestOwnershipModes: the kubelet's modes and the group, through fchmodat2
// and through its fallback for kernels before 6.6; symlinks get the group
// themselves and their targets are untouched.
func TestOwnershipModes(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		t.Run(map[bool]string{false: "fchmodat2", true: "proc fd"}[fallback], func(t *testing.T) {
			defer func(was bool) { noFchmodat2.Store(was) }(noFchmodat2.Load())
			noFchmodat2.Store(fallback)
			checkModes(t)
		})
	}
}

func checkModes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another group needs root")
	}
	vol, outside := t.TempDir(), t.TempDir()
	mkdir(t, filepath.Join(outside, "dir"), 0o700)
	writeMode(t, filepath.Join(outside, "file"), 0o600)
	before := owners(t, outside)
	mkdir(t, filepath.Join(vol, "private"), 0o700)
	mkdir(t, filepath.Join(vol, "tmp"), 0o1777)
	for name, mode := range map[string]uint32{"private/f": 0o600, "exec": 0o755, "readonly": 0o444, "setuid": 0o4755, "setgid-noexec": 0o2644} {
		writeMode(t, filepath.Join(vol, name), mode)
	}
	writeMode(t, filepath.Join(vol, "done"), 0o664)
	if err := os.Chown(filepath.Join(vol, "done"), -1, testGID); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(vol, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"link": filepath.Join(outside, "file"), "dirlink": filepath.Join(outside, "dir"), "dangling": "nowhere"} {
		if err := os.Symlink(target, filepath.Join(vol, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Chmod(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := walk(t, vol, nil); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint32{
		"": 0o2775, "private": 0o2770, "tmp": 0o3777, "private/f": 0o660, "exec": 0o775, "readonly": 0o664,
		"setuid":        0o775,  // the chown cleared setuid; it is not put back
		"setgid-noexec": 0o2664, // setgid without group execute survives a chown
		"done":          0o664, "fifo": 0o660, "link": 0o777, "dirlink": 0o777, "dangling": 0o777,
	} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(vol, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Gid != testGID || st.Mode&0o7777 != want {
			t.Errorf("%q: gid %d mode %04o; want %d %04o", name, st.Gid, st.Mode&0o7777, testGID, want)
		}
	}
	checkSameOwners(t, before, owners(t, outside))
}

// TestOwnershipOnRootMismatch: with OnRootMismatch a volume whose top
// directory has the group and modes is not walked; one whose top has not
// is.
func TestOwnershipOnRootMismatch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another group needs root")
	}
	for _, tc := range []struct {
		name     string
		topGID   int
		topMode  uint32
		policy   v1.PodFSGroupChangePolicy
		wantFile uint32 // the gid the file below ends with
	}{
		{"top done", testGID, 0o2770, v1.FSGroupChangeOnRootMismatch, 0},
		{"top not setgid", testGID, 0o770, v1.FSGroupChangeOnRootMismatch, testGID},
		{"top of another group", 0, 0o2770, v1.FSGroupChangeOnRootMismatch, testGID},
		{"top done, policy Always", testGID, 0o2770, v1.FSGroupChangeAlways, testGID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vol := t.TempDir()
			writeMode(t, filepath.Join(vol, "f"), 0o600)
			if err := os.Chown(vol, -1, tc.topGID); err != nil {
				t.Fatal(err)
			}
			if err := unix.Chmod(vol, tc.topMode); err != nil {
				t.Fatal(err)
			}
			if _, err := setOwnership(context.Background(), vol, testGID, tc.policy, nil); err != nil {
				t.Fatal(err)
			}
			if gid := gidOf(t, filepath.Join(vol, "f")); gid != tc.wantFile {
				t.Errorf("file: gid %d; want %d", gid, tc.wantFile)
			}
		})
	}
}

// TestOwnershipHardLinks: a file with one link is changed; every file
// with more than one is left as it is, and counted, wherever its other
// links are: the walk cannot tell (TestOwnershipNeverCountsItsWayOut).
func TestOwnershipHardLinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another group needs root")
	}
	vol, outside := t.TempDir(), t.TempDir()
	mkdir(t, filepath.Join(vol, "sub"), 0o755)
	writeMode(t, filepath.Join(vol, "a"), 0o600)
	writeMode(t, filepath.Join(vol, "one"), 0o600)
	writeMode(t, filepath.Join(outside, "shadow"), 0o600)
	writeMode(t, filepath.Join(outside, "passwd"), 0o600)
	for link, target := range map[string]string{
		"sub/a2": filepath.Join(vol, "a"), // both links inside
		"s":      filepath.Join(outside, "shadow"),
		"p1":     filepath.Join(outside, "passwd"), // two links inside, one outside
		"sub/p2": filepath.Join(outside, "passwd"),
	} {
		if err := os.Link(target, filepath.Join(vol, link)); err != nil {
			t.Fatal(err)
		}
	}
	before := owners(t, outside)
	skipped, err := setOwnership(context.Background(), vol, testGID, v1.FSGroupChangeAlways, nil)
	if err != nil {
		t.Fatal(err)
	}
	if skipped != 5 {
		t.Errorf("%d entries reported left alone; want 5", skipped)
	}
	checkSameOwners(t, before, owners(t, outside))
	for name, want := range map[string]owner{"one": {0o660, 0, testGID}, "a": {0o600, 0, 0}, "sub/a2": {0o600, 0, 0}} {
		if gid, mode := linkOf(t, filepath.Join(vol, name)); gid != want.gid || mode != uint32(want.mode) {
			t.Errorf("%s: gid %d mode %04o; want %d %04o", name, gid, mode, want.gid, want.mode)
		}
	}
}

// TestOwnershipDirectoryMovedDuringTheWalk: a directory above the walk
// moved elsewhere in the volume stops the walk with an error rather than
// letting ".." take it somewhere it did not come from.
func TestOwnershipDirectoryMovedDuringTheWalk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another group needs root")
	}
	vol := t.TempDir()
	unix.Close(openDeep(t, vol, 30, true))
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = time.Nanosecond
	err := walk(t, vol, func(n int, _ time.Duration, _ bool) {
		if n == 10 { // the walk is 8 levels below vol/d/d
			if err := os.Rename(filepath.Join(vol, "d", "d"), filepath.Join(vol, "moved")); err != nil {
				t.Error(err)
			}
		}
	})
	if !errors.Is(err, errMoved) {
		t.Fatalf("walk = %v; want %v", err, errMoved)
	}
}

// TestOwnershipStopsWithTheContext: a cancelled context stops the walk.
func TestOwnershipStopsWithTheContext(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another group needs root")
	}
	vol := t.TempDir()
	for i := range 50 {
		writeMode(t, filepath.Join(vol, string(rune('A'+i))), 0o600)
	}
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = time.Nanosecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	last := 0
	_, err := setOwnership(ctx, vol, testGID, v1.FSGroupChangeAlways, func(n int, _ time.Duration, done bool) {
		if last = n; n == 5 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || last > 6 {
		t.Errorf("walk = %v after %d entries; want it cancelled after 6 at most", err, last)
	}
}

// A directory removed after the walk opened it can still be opened for
// reading, but reading it fails with ENOENT, which the walk takes as gone.
func TestReadNamesOfARemovedDirectory(t *testing.T) {
	dir := t.TempDir()
	mkdir(t, filepath.Join(dir, "gone"), 0o755)
	top, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(top)
	fd, err := openEntry(top, "gone")
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	st, err := statFd(fd)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "gone")); err != nil {
		t.Fatal(err)
	}
	child, err := openDirAgain(fd, st)
	if err != nil {
		t.Fatalf("openDirAgain of a removed directory: %v", err)
	}
	defer unix.Close(child)
	if names, err := readNames(child, make([]byte, 4096)); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("readNames of a removed directory = %q, %v; want ENOENT", names, err)
	}
}
