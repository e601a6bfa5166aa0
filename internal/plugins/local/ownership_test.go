package local

import (
	"context"
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
	vol := t.TempDir()
	fd := openDeep(t, vol, depth, true)
	unix.Close(fd)
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = time.Nanosecond
	base, most := openFDs(t), 0
	err := walk(t, vol, func(int, time.Duration, bool) { most = max(most, openFDs(t)) })
	if err != nil {
		t.Fatalf("walk: %v", err)
	}
	if most-base > 4 {
		t.Errorf("%d descriptors open during the walk, %d before; want at most 4 more", most, base)
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
