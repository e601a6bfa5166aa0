package mount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a real tmpfs")
	}
}

func TestMountArgsPutUserInputAfterDoubleDash(t *testing.T) {
	got := mountArgs(Mount{Type: "nfs", Source: "-oremount", Options: []string{"ro"}}, "-x")
	want := []string{"-t", "nfs", "-o", "ro", "--", "-oremount", "-x"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("mountArgs = %q, want %q", got, want)
	}
}

func TestSystemMountTmpfs(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	var m System
	if err := m.Mount(ctx, Mount{Type: "tmpfs", Source: "tmpfs", Options: []string{"size=1m", "mode=0700"}}, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Unmount(ctx, dir) })
	ok, err := m.IsMountPoint(ctx, dir)
	if err != nil || !ok {
		t.Fatalf("IsMountPoint = %v, %v; want true", ok, err)
	}
	under, err := m.MountsUnder(ctx, filepath.Dir(dir))
	if err != nil || len(under) != 1 || under[0] != dir {
		t.Fatalf("MountsUnder = %v, %v; want [%s]", under, err, dir)
	}
	if err := m.Unmount(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if ok, _ := m.IsMountPoint(ctx, dir); ok {
		t.Fatal("still a mount point after Unmount")
	}
}

func TestSystemMountFailureSaysWhy(t *testing.T) {
	needRoot(t)
	err := System{}.Mount(context.Background(), Mount{Type: "no-such-fs", Source: "x"}, t.TempDir())
	if err == nil {
		t.Fatal("mount of an unknown file system type succeeded")
	}
}

// TestBoundedGivesUpAtDeadline plays storage that stops answering: fn blocks
// until the test releases it. Bounded must return DeadlineExceeded soon after
// the deadline, not wait for fn.
func TestBoundedGivesUpAtDeadline(t *testing.T) {
	release := make(chan struct{})
	finished := make(chan struct{})
	// Release fn after a while even if Bounded waits for it, so that a
	// Bounded ignoring ctx fails the test instead of hanging it.
	unblock := sync.OnceFunc(func() { close(release) })
	timer := time.AfterFunc(5*time.Second, unblock)
	defer timer.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Bounded(ctx, func() (bool, error) {
		defer close(finished)
		<-release
		return true, nil
	})
	elapsed := time.Since(start)
	unblock()
	<-finished // fn's goroutine ends: goleak stays happy
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Bounded = %v, want DeadlineExceeded", err)
	}
	if elapsed > 2*time.Second {
		t.Fatalf("Bounded returned %v after a 50ms deadline", elapsed)
	}
}

func TestBoundedReturnsWhatFnReturns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want := errors.New("stat failed")
	v, err := Bounded(ctx, func() (int, error) { return 7, want })
	if v != 7 || !errors.Is(err, want) {
		t.Fatalf("Bounded = %v, %v; want 7, %v", v, err, want)
	}
}

func TestRemoveAllRemovesTreeWithoutFollowingSymlinks(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "keep")
	mustWrite(t, secret)
	dir := filepath.Join(t.TempDir(), "vol")
	mustMkdir(t, filepath.Join(dir, "a", "b"))
	mustWrite(t, filepath.Join(dir, "a", "b", "f"))
	mustSymlink(t, outside, filepath.Join(dir, "link-to-dir"))
	mustSymlink(t, secret, filepath.Join(dir, "a", "link-to-file"))
	if err := RemoveAll(context.Background(), &Fake{}, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("dir still there: %v", err)
	}
	if _, err := os.Stat(secret); err != nil {
		t.Fatalf("file behind a symlink was removed: %v", err)
	}
}

func TestRemoveAllMissingDirIsNotAnError(t *testing.T) {
	if err := RemoveAll(context.Background(), &Fake{}, filepath.Join(t.TempDir(), "none")); err != nil {
		t.Fatal(err)
	}
}

func TestRemoveAllRefusesWhenAMountIsBelow(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	nested := filepath.Join(dir, "nested")
	mustMkdir(t, nested)
	var m System
	bindSrc := t.TempDir()
	data := filepath.Join(bindSrc, "data")
	mustWrite(t, data)
	if err := m.Mount(ctx, Mount{Type: "none", Source: bindSrc, Options: []string{"bind"}}, nested); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Unmount(ctx, nested) })
	err := RemoveAll(ctx, m, dir)
	if !errors.Is(err, ErrMountPointsRemain) {
		t.Fatalf("RemoveAll = %v, want ErrMountPointsRemain", err)
	}
	if _, err := os.Stat(data); err != nil {
		t.Fatalf("data behind a bind mount was touched: %v", err)
	}
}

func TestRemoveTreeNeverCrossesMounts(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	nested := filepath.Join(dir, "tmp")
	mustMkdir(t, nested)
	var m System
	if err := m.Mount(ctx, Mount{Type: "tmpfs", Source: "tmpfs", Options: []string{"size=1m"}}, nested); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Unmount(ctx, nested) })
	data := filepath.Join(nested, "data")
	mustWrite(t, data)
	// Skip the mount table check to exercise the mount ID check alone.
	if err := removeTree(ctx, dir); err == nil {
		t.Fatal("removeTree crossed into a tmpfs")
	}
	if _, err := os.Stat(data); err != nil {
		t.Fatalf("data on the nested tmpfs was removed: %v", err)
	}
}

func mustWrite(t *testing.T, p string) {
	t.Helper()
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func TestPrivileged(t *testing.T) {
	if !Privileged(System{}) || !Privileged(&Fake{}) || Privileged(Unprivileged{}) {
		t.Fatal("Privileged: want true for System and Fake, false for Unprivileged")
	}
}
