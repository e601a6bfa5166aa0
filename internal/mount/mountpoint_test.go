package mount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// bind bind-mounts src on target with mount(2) until the test ends.
func bind(t *testing.T, src, target string) {
	t.Helper()
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
}

// A bind mount of the same file system has its parent's device number;
// IsMountPoint finds it all the same, by mount ID.
func TestIsMountPointFindsASameFilesystemBindMount(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	base := t.TempDir()
	src, dir := filepath.Join(base, "src"), filepath.Join(base, "dir")
	mustMkdir(t, src)
	mustMkdir(t, dir)
	if mounted, err := (System{}).IsMountPoint(ctx, dir); err != nil || mounted {
		t.Fatalf("IsMountPoint of a plain directory = %v, %v; want false", mounted, err)
	}
	bind(t, src, dir)
	var st, parent unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(base, &parent); err != nil {
		t.Fatal(err)
	}
	if st.Dev != parent.Dev {
		t.Fatalf("the bind mount's device %d differs from its parent's %d: the test needs a same-file-system bind", st.Dev, parent.Dev)
	}
	if mounted, err := (System{}).IsMountPoint(ctx, dir); err != nil || !mounted {
		t.Fatalf("IsMountPoint of a same-file-system bind mount = %v, %v; want true", mounted, err)
	}
	link := filepath.Join(base, "link")
	mustSymlink(t, dir, link)
	if mounted, err := (System{}).IsMountPoint(ctx, link); err != nil || mounted {
		t.Errorf("IsMountPoint of a symlink to a mount point = %v, %v; want false (not followed)", mounted, err)
	}
	if _, err := (System{}).IsMountPoint(ctx, filepath.Join(base, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("IsMountPoint of a missing path: %v, want ErrNotExist", err)
	}
	if mounted, err := (System{}).IsMountPoint(ctx, "/"); err != nil || !mounted {
		t.Errorf("IsMountPoint(/) = %v, %v; want true", mounted, err)
	}
}

// MountsUnder finds, without the mount table, a mount on dir itself, a
// directory bind mount and a file bind mount of the same file system
// below it, and the mounts of a tree deeper than its walk (through the
// mount table).
func TestMountsUnderFindsMountsByWalking(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	base := t.TempDir()
	dir := filepath.Join(base, "vol")
	src := filepath.Join(base, "src")
	mustMkdir(t, filepath.Join(src, "sub"))
	mustWrite(t, filepath.Join(src, "file"))
	nestedDir := filepath.Join(dir, "a", "b")
	nestedFile := filepath.Join(dir, "a", "f")
	mustMkdir(t, nestedDir)
	mustWrite(t, nestedFile)
	mustWrite(t, filepath.Join(dir, "plain"))
	mustSymlink(t, src, filepath.Join(dir, "link"))
	m := System{}
	if got, err := m.MountsUnder(ctx, dir); err != nil || len(got) != 0 {
		t.Fatalf("MountsUnder with no mounts = %v, %v; want none", got, err)
	}
	bind(t, filepath.Join(src, "sub"), nestedDir)
	bind(t, filepath.Join(src, "file"), nestedFile)
	got, err := m.MountsUnder(ctx, dir)
	slices.Sort(got)
	if want := []string{nestedDir, nestedFile}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("MountsUnder = %v, %v; want %v", got, err, want)
	}
	bind(t, src, dir)
	if got, err := m.MountsUnder(ctx, dir); err != nil || !slices.Equal(got, []string{dir}) {
		t.Fatalf("MountsUnder of a mount point = %v, %v; want [%s]", got, err, dir)
	}
	if got, err := m.MountsUnder(ctx, filepath.Join(base, "missing")); err != nil || len(got) != 0 {
		t.Fatalf("MountsUnder of a missing dir = %v, %v; want none", got, err)
	}
}

func TestMountsUnderDeeperThanTheWalk(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "vol")
	deep := filepath.Join(dir, strings.Repeat("d/", maxScanDepth+1))
	mustMkdir(t, deep)
	if _, err := scanMounts(ctx, dir); !errors.Is(err, errTooDeep) {
		t.Fatalf("scanMounts of a tree deeper than %d levels = %v, want errTooDeep", maxScanDepth, err)
	}
	bind(t, t.TempDir(), deep)
	got, err := System{}.MountsUnder(ctx, dir)
	if want := []string{filepath.Clean(deep)}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("MountsUnder = %v, %v; want %v", got, err, want)
	}
}

func TestMountRootTellsBindsOfTheSameDirectory(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	base := t.TempDir()
	src, other := filepath.Join(base, "src"), filepath.Join(base, "other")
	a, b, c := filepath.Join(base, "a"), filepath.Join(base, "b"), filepath.Join(base, "c")
	for _, d := range []string{src, other, a, b, c} {
		mustMkdir(t, d)
	}
	if _, mounted, err := MountRoot(ctx, a); err != nil || mounted {
		t.Fatalf("MountRoot of a plain directory: mounted = %v, %v; want false", mounted, err)
	}
	bind(t, src, a)
	bind(t, src, b)
	bind(t, other, c)
	idA, okA, errA := MountRoot(ctx, a)
	idB, okB, errB := MountRoot(ctx, b)
	idC, okC, errC := MountRoot(ctx, c)
	if err := errors.Join(errA, errB, errC); err != nil || !okA || !okB || !okC {
		t.Fatalf("MountRoot: %v, %v %v %v; want three mount points", err, okA, okB, okC)
	}
	if idA != idB || idA == idC {
		t.Fatalf("MountRoot ids %v %v %v: want a and b equal (binds of src), c different", idA, idB, idC)
	}
}
