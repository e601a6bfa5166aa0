package mount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var tmpfs = Mount{Type: "tmpfs", Source: "tmpfs", Options: []string{"size=1m"}}

// mountsAt counts the kernel's mount table entries at dir: two mounts
// stacked on dir count twice (System.MountsUnder would list dir once).
func mountsAt(t *testing.T, dir string) int {
	t.Helper()
	under, err := mountsInTable(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range under {
		if m == dir {
			n++
		}
	}
	return n
}

func TestEnsureMountedFakeMountsOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := &Fake{}
	for i, want := range []bool{true, false, false} {
		mounted, err := EnsureMounted(ctx, f, tmpfs, dir)
		if err != nil || mounted != want {
			t.Fatalf("call %d: EnsureMounted = %v, %v; want %v, nil", i, mounted, err, want)
		}
	}
	if want := []string{"mount tmpfs " + dir}; !reflect.DeepEqual(f.Calls(), want) {
		t.Fatalf("calls = %q, want %q", f.Calls(), want)
	}
}

func TestEnsureMountedSystemMountsOnce(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	t.Cleanup(func() { _ = System{}.Unmount(ctx, dir) })
	for i, want := range []bool{true, false} {
		mounted, err := EnsureMounted(ctx, System{}, tmpfs, dir)
		if err != nil || mounted != want {
			t.Fatalf("call %d: EnsureMounted = %v, %v; want %v, nil", i, mounted, err, want)
		}
	}
	if n := mountsAt(t, dir); n != 1 {
		t.Fatalf("%d mounts at %s, want 1", n, dir)
	}
}

func TestEnsureMountedErrors(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	if _, err := EnsureMounted(ctx, &Fake{}, tmpfs, filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("EnsureMounted on a missing dir = %v, want ErrNotExist", err)
	}
	// A failed mount may have happened (a deadline passed): report that
	// it was attempted, so that a caller rolling back unmounts.
	if mounted, err := EnsureMounted(ctx, &Fake{MountErr: boom}, tmpfs, t.TempDir()); !errors.Is(err, boom) || !mounted {
		t.Errorf("EnsureMounted with a failing mount = %v, %v; want true, %v", mounted, err, boom)
	}
}

func TestRemoveDirFake(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		mountAt     string // relative to dir; "-" for none
		wantErr     error
		wantUnmount bool
	}{
		{name: "plain directory", mountAt: "-"},
		{name: "tmpfs on dir", mountAt: ".", wantUnmount: true},
		{name: "mount nested inside", mountAt: "sub", wantErr: ErrMountPointsRemain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "vol")
			mustMkdir(t, filepath.Join(dir, "sub"))
			mustWrite(t, filepath.Join(dir, "sub", "f"))
			f := &Fake{}
			if tc.mountAt != "-" {
				if err := f.Mount(ctx, tmpfs, filepath.Join(dir, tc.mountAt)); err != nil {
					t.Fatal(err)
				}
			}
			err := RemoveDir(ctx, f, dir)
			if !errors.Is(err, tc.wantErr) || (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("RemoveDir = %v, want %v", err, tc.wantErr)
			}
			_, statErr := os.Lstat(filepath.Join(dir, "sub", "f"))
			if removed := errors.Is(statErr, os.ErrNotExist); removed != (tc.wantErr == nil) {
				t.Errorf("file removed = %v, want %v", removed, tc.wantErr == nil)
			}
			if unmounted := slices.Contains(f.Calls(), "unmount "+dir); unmounted != tc.wantUnmount {
				t.Errorf("calls = %q, want unmount of dir %v", f.Calls(), tc.wantUnmount)
			}
		})
	}
}

func TestRemoveDirMissingIsNotAnError(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for name, m := range map[string]Mounter{"fake": &Fake{}, "system": System{}} {
		if err := RemoveDir(context.Background(), m, missing); err != nil {
			t.Errorf("%s: RemoveDir of a missing dir: %v", name, err)
		}
	}
}

func TestRemoveDirUnmountsTmpfs(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "vol")
	mustMkdir(t, dir)
	if err := (System{}).Mount(ctx, tmpfs, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = System{}.Unmount(ctx, dir) })
	mustMkdir(t, filepath.Join(dir, "a"))
	mustWrite(t, filepath.Join(dir, "a", "f"))
	if err := RemoveDir(ctx, System{}, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dir still there: %v", err)
	}
	if n := mountsAt(t, dir); n != 0 {
		t.Fatalf("%d mounts left at %s", n, dir)
	}
}

func TestRemoveDirRefusesNestedMount(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	for _, onTmpfs := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "vol")
		mustMkdir(t, dir)
		if onTmpfs {
			if err := (System{}).Mount(ctx, tmpfs, dir); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = System{}.Unmount(ctx, dir) })
		}
		nested := filepath.Join(dir, "nested")
		mustMkdir(t, nested)
		src := t.TempDir()
		mustWrite(t, filepath.Join(src, "data"))
		if err := (System{}).Mount(ctx, Mount{Type: "none", Source: src, Options: []string{"bind"}}, nested); err != nil {
			t.Fatal(err)
		}
		err := RemoveDir(ctx, System{}, dir)
		_ = System{}.Unmount(ctx, nested)
		if err == nil || (!onTmpfs && !errors.Is(err, ErrMountPointsRemain)) {
			t.Errorf("tmpfs=%v: RemoveDir = %v, want an error (ErrMountPointsRemain on disk)", onTmpfs, err)
		}
		if _, err := os.Stat(filepath.Join(src, "data")); err != nil {
			t.Errorf("tmpfs=%v: data behind the nested mount: %v", onTmpfs, err)
		}
	}
}

func TestUnprivileged(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var m Unprivileged
	mounted, err := EnsureMounted(ctx, m, tmpfs, dir)
	if err != nil || !mounted {
		t.Fatalf("EnsureMounted(tmpfs) = %v, %v; want true, nil", mounted, err)
	}
	if ok, err := m.IsMountPoint(ctx, dir); err != nil || ok {
		t.Fatalf("IsMountPoint after an unprivileged tmpfs = %v, %v; want false: nothing is mounted", ok, err)
	}
	err = m.Mount(ctx, Mount{Type: "none", Source: t.TempDir(), Options: []string{"bind"}}, dir)
	if err == nil || !strings.Contains(err.Error(), "needs root") {
		t.Fatalf("bind mount = %v, want an error saying it needs root", err)
	}
	if ok, _ := m.IsMountPoint(ctx, dir); ok {
		t.Fatal("a refused bind mount mounted")
	}
	if err := RemoveDir(ctx, m, dir); err != nil {
		t.Fatal(err)
	}
}

func TestMakeDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b", "vol")
	if created, err := MakeDir(dir, 0o700); err != nil || !created {
		t.Fatalf("MakeDir new = %v, %v; want true, nil", created, err)
	}
	mustWrite(t, filepath.Join(dir, "keep"))
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if created, err := MakeDir(dir, 0o700); err != nil || created {
		t.Fatalf("MakeDir existing = %v, %v; want false, nil", created, err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o711 {
		t.Fatalf("existing dir: %v, %v; want mode 0711 left alone", fi, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "keep")); err != nil {
		t.Fatalf("content of an existing dir: %v", err)
	}
}

func TestRollbackContextOutlivesCancellationButIsBounded(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "pod"))
	cancel() // the operation failed because its context ended
	ctx, stop := RollbackContext(parent)
	defer stop()
	if err := ctx.Err(); err != nil {
		t.Fatalf("rollback context ended with its parent: %v", err)
	}
	deadline, ok := ctx.Deadline()
	if !ok || time.Until(deadline) > rollbackTimeout {
		t.Fatalf("rollback deadline = %v, %v; want one within %v", deadline, ok, rollbackTimeout)
	}
	if got := ctx.Value(key{}); got != "pod" {
		t.Fatalf("rollback context value = %v, want the parent's", got)
	}
	stop()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("after stop, Err = %v, want Canceled", ctx.Err())
	}
}

// askingMounter counts the IsMountPoint questions asked of its Fake.
type askingMounter struct {
	*Fake
	asked int
}

func (m *askingMounter) IsMountPoint(ctx context.Context, path string) (bool, error) {
	m.asked++
	return m.Fake.IsMountPoint(ctx, path)
}

// TestMountOnAsksOnlyOfADirectoryItDidNotMake: a directory the caller has
// just made is mounted without asking whether it is a mount point; one that
// existed is asked, and not mounted twice.
func TestMountOnAsksOnlyOfADirectoryItDidNotMake(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m := &askingMounter{Fake: &Fake{}}
	if mounted, err := MountOn(ctx, m, tmpfs, dir, true); err != nil || !mounted {
		t.Fatalf("MountOn a new directory = %v, %v; want true, nil", mounted, err)
	}
	if m.asked != 0 {
		t.Fatalf("MountOn a new directory asked IsMountPoint %d times, want 0", m.asked)
	}
	if mounted, err := MountOn(ctx, m, tmpfs, dir, false); err != nil || mounted {
		t.Fatalf("MountOn the mounted directory = %v, %v; want false, nil", mounted, err)
	}
	if want := []string{"mount tmpfs " + dir}; m.asked != 1 || !reflect.DeepEqual(m.Calls(), want) {
		t.Fatalf("asked %d times, calls %q; want 1 and %q", m.asked, m.Calls(), want)
	}
}

// counting is a Mounter that counts the mount-point questions asked: which
// path RemoveDir took shows in them.
type counting struct {
	Mounter
	isMountPoint, mountsUnder int
}

func (c *counting) IsMountPoint(ctx context.Context, path string) (bool, error) {
	c.isMountPoint++
	return c.Mounter.IsMountPoint(ctx, path)
}

func (c *counting) MountsUnder(ctx context.Context, dir string) ([]string, error) {
	c.mountsUnder++
	return c.Mounter.MountsUnder(ctx, dir)
}

// TestRemoveDirScansOnce: a directory that is no mount point is removed
// after one scan for mounts (no mount-point check before it, no second
// scan); a tmpfs once unmounted is removed by rmdir, with no scan of what
// its unmount uncovered when that is the empty directory.
func TestRemoveDirScansOnce(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	plain := filepath.Join(t.TempDir(), "plain")
	mustMkdir(t, filepath.Join(plain, "a"))
	mustWrite(t, filepath.Join(plain, "a", "f"))
	onTmpfs := filepath.Join(t.TempDir(), "tmpfs")
	mustMkdir(t, onTmpfs)
	if err := (System{}).Mount(ctx, tmpfs, onTmpfs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = System{}.Unmount(ctx, onTmpfs) })
	mustMkdir(t, filepath.Join(onTmpfs, "a"))
	mustWrite(t, filepath.Join(onTmpfs, "a", "f"))
	for _, dir := range []string{plain, onTmpfs} {
		c := &counting{Mounter: System{}}
		if err := RemoveDir(ctx, c, dir); err != nil {
			t.Fatalf("%s: %v", filepath.Base(dir), err)
		}
		if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: still there: %v", filepath.Base(dir), err)
		}
		if c.isMountPoint != 0 || c.mountsUnder != 1 {
			t.Errorf("%s: %d IsMountPoint, %d MountsUnder; want 0 and 1", filepath.Base(dir), c.isMountPoint, c.mountsUnder)
		}
	}
	if n := mountsAt(t, onTmpfs); n != 0 {
		t.Fatalf("%d mounts left at %s", n, onTmpfs)
	}
}

// TestRemoveDirWalksWhatTheUnmountUncovers: files under a tmpfs's mount
// point (written before the mount) stop the rmdir; they are removed by
// RemoveAll, after its own scan.
func TestRemoveDirWalksWhatTheUnmountUncovers(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "vol")
	mustMkdir(t, filepath.Join(dir, "under"))
	mustWrite(t, filepath.Join(dir, "under", "f"))
	if err := (System{}).Mount(ctx, tmpfs, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = System{}.Unmount(ctx, dir) })
	c := &counting{Mounter: System{}}
	if err := RemoveDir(ctx, c, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dir still there: %v", err)
	}
	if c.mountsUnder != 2 {
		t.Errorf("%d MountsUnder, want 2: the uncovered tree is scanned before its walk", c.mountsUnder)
	}
}

// TestRemoveDirRefusesStackedMounts: with two tmpfs stacked on dir, one
// unmount leaves a mount point: its rmdir fails (EBUSY), and RemoveAll's
// scan refuses it; the lower tmpfs's content stays.
func TestRemoveDirRefusesStackedMounts(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "vol")
	mustMkdir(t, dir)
	for range 2 {
		if err := (System{}).Mount(ctx, tmpfs, dir); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = System{}.Unmount(ctx, dir) })
		mustWrite(t, filepath.Join(dir, "f"))
	}
	err := RemoveDir(ctx, System{}, dir)
	if !errors.Is(err, ErrMountPointsRemain) {
		t.Fatalf("RemoveDir = %v, want ErrMountPointsRemain", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "f")); err != nil {
		t.Fatalf("the lower tmpfs's file: %v", err)
	}
	if n := mountsAt(t, dir); n != 1 {
		t.Fatalf("%d mounts at %s, want the lower one", n, dir)
	}
}
