package mount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestRemoveAllRemovesATree(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	mustMkdir(t, filepath.Join(dir, "a", "b", "c"))
	mustMkdir(t, filepath.Join(dir, "empty"))
	for _, f := range []string{"f", "a/f", "a/b/f", "a/b/c/f"} {
		mustWrite(t, filepath.Join(dir, f))
	}
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "keep"))
	if err := os.Symlink(outside, filepath.Join(dir, "a", "link")); err != nil {
		t.Fatal(err)
	}
	for i := range 600 { // more than one directory read
		mustWrite(t, filepath.Join(dir, "a", "b", "many-"+strconv.Itoa(i)))
	}
	if err := RemoveAll(context.Background(), &Fake{}, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dir still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Fatalf("a symlink was followed: %v", err)
	}
}

// A pod can make a directory chain far deeper than the agent has file
// descriptors. Removal must not need one per level.
func TestRemoveAllDeepChainWithFewDescriptors(t *testing.T) {
	const depth = 2000 // far more than the 64 descriptors allowed below
	dir := filepath.Join(t.TempDir(), "vol")
	mustMkdir(t, dir)
	makeChain(t, dir, depth)

	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = 64
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	err := RemoveAll(context.Background(), &Fake{}, dir)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		if len(err.Error()) > 1024 {
			t.Fatalf("RemoveAll failed with a %d-byte error", len(err.Error()))
		}
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dir still there: %v", err)
	}
}

// makeChain creates dir/d/d/d/... depth levels deep, with a file at the
// bottom, through descriptors (the path is far longer than PATH_MAX).
func makeChain(t *testing.T, dir string, depth int) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range depth {
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	f, err := unix.Openat(fd, "bottom", unix.O_CREAT|unix.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(f)
	unix.Close(fd)
}

// An error deep in a tree names the depth and the entry, not the path.
func TestRemoveAllErrorIsBounded(t *testing.T) {
	needRoot(t)
	dir := filepath.Join(t.TempDir(), "vol")
	mustMkdir(t, dir)
	makeChain(t, dir, 1000)
	// An immutable file at the bottom cannot be removed, even by root. Its
	// path is too long to use: reach it through descriptors.
	fd := openChainBottom(t, dir, 1000)
	f, err := unix.Openat(fd, "bottom", unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(f, unix.FS_IOC_SETFLAGS, fsImmutable); err != nil {
		unix.Close(f)
		unix.Close(fd)
		t.Skipf("file system does not support the immutable flag: %v", err)
	}
	t.Cleanup(func() {
		_ = unix.IoctlSetPointerInt(f, unix.FS_IOC_SETFLAGS, 0)
		unix.Close(f)
		unix.Close(fd)
		_ = RemoveAll(context.Background(), &Fake{}, dir)
	})
	err = RemoveAll(context.Background(), &Fake{}, dir)
	if err == nil || !strings.Contains(err.Error(), "depth 1000") || !strings.Contains(err.Error(), "bottom") {
		t.Fatalf("RemoveAll = %v; want an error naming depth 1000 and the entry", err)
	}
	if len(err.Error()) > 1024 {
		t.Fatalf("error is %d bytes long", len(err.Error()))
	}
}

// fsImmutable is FS_IMMUTABLE_FL of linux/fs.h (chattr +i).
const fsImmutable = 0x10

func openChainBottom(t *testing.T, dir string, depth int) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range depth {
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	return fd
}

// The second line of defence: when the mount table check missed a mount
// (here a Fake mounter that knows none), a bind mount of the same file
// system inside the tree — same device number — is still never entered.
func TestRemoveAllNeverCrossesASameFilesystemBindMount(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	base := t.TempDir()
	dir := filepath.Join(base, "vol")
	nested := filepath.Join(dir, "a", "nested")
	mustMkdir(t, nested)
	mustWrite(t, filepath.Join(dir, "a", "f"))
	src := filepath.Join(base, "precious") // same file system as dir
	mustMkdir(t, src)
	mustWrite(t, filepath.Join(src, "data"))
	if err := (System{}).Mount(ctx, Mount{Type: "none", Source: src, Options: []string{"bind"}}, nested); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = System{}.Unmount(ctx, nested) })
	var a, b unix.Stat_t
	if unix.Stat(nested, &a) != nil || unix.Stat(dir, &b) != nil || a.Dev != b.Dev {
		t.Fatal("the bind mount is not on the same device: the test proves nothing")
	}
	err := RemoveAll(ctx, &Fake{}, dir)
	if err == nil || !strings.Contains(err.Error(), "another mount") {
		t.Fatalf("RemoveAll = %v; want a refusal to cross the bind mount", err)
	}
	if _, err := os.Stat(filepath.Join(src, "data")); err != nil {
		t.Fatalf("data behind the bind mount: %v", err)
	}
}

func TestRemoveAllRefusesAPathThroughASymlink(t *testing.T) {
	real := t.TempDir()
	mustMkdir(t, filepath.Join(real, "vol"))
	mustWrite(t, filepath.Join(real, "vol", "f"))
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	err := RemoveAll(context.Background(), &Fake{}, filepath.Join(link, "vol"))
	if err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("RemoveAll through a symlink = %v; want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(real, "vol", "f")); err != nil {
		t.Fatal(err)
	}
}

func TestRemoveAllStopsWhenTheContextEnds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	mustMkdir(t, dir)
	makeChain(t, dir, 10)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := RemoveAll(ctx, &Fake{}, dir); !errors.Is(err, context.Canceled) {
		t.Fatalf("RemoveAll with an ended context = %v, want context.Canceled", err)
	}
}

// TestRemoveAllRemovesFilesBesideDirectoriesNotEmpty: several directories
// that are not empty, with files, symlinks and empty directories between
// them in the listing, are all removed (the files in the pass that finds
// the first directory, the other directories at later visits).
func TestRemoveAllRemovesFilesBesideDirectoriesNotEmpty(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	for i := range 5 {
		d := filepath.Join(dir, "d"+strconv.Itoa(i))
		mustMkdir(t, filepath.Join(d, "nested", "deeper"))
		mustWrite(t, filepath.Join(d, "f"))
		mustWrite(t, filepath.Join(d, "nested", "deeper", "f"))
		mustWrite(t, filepath.Join(dir, "f"+strconv.Itoa(i)))
		mustMkdir(t, filepath.Join(dir, "empty"+strconv.Itoa(i)))
		if err := os.Symlink("d"+strconv.Itoa(i), filepath.Join(dir, "l"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveAll(context.Background(), &Fake{}, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dir still there: %v", err)
	}
}
