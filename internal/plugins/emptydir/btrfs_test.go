package emptydir_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/volume-agent/volume-agent/internal/btrfs/btrfstest"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/emptydir"
)

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// qgroups is the output of btrfs qgroup show for root.
func qgroups(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.Command("btrfs", "qgroup", "show", "--raw", root).CombinedOutput()
	if err != nil {
		t.Fatalf("btrfs qgroup show: %v: %s", err, out)
	}
	return string(out)
}

// TestSizeLimitOnBtrfs: on a btrfs root with quotas, a 10Mi disk emptyDir
// is a subvolume that refuses, with EDQUOT, to hold 11 MiB; a second
// set-up (a restart) keeps it and its data; teardown deletes it and its
// qgroup. An emptyDir without sizeLimit, and one found on disk as a plain
// directory, stay plain directories.
func TestSizeLimitOnBtrfs(t *testing.T) {
	root := btrfstest.Mount(t, true)
	ctx := context.Background()
	p := &emptydir.Plugin{Mounter: mount.System{}, Limiter: emptydir.Btrfs{}}
	limit := resource.MustParse("10Mi")
	limited := spec(v1.EmptyDirVolumeSource{SizeLimit: &limit})
	dir := filepath.Join(root, "pods", "uid", "volumes", "kubernetes.io~empty-dir", "scratch")
	if _, err := p.SetUp(ctx, limited, dir); err != nil {
		t.Fatal(err)
	}
	if ino := inode(t, dir); ino != 256 {
		t.Fatalf("%s has inode %d, want a subvolume (256)", dir, ino)
	}
	written := 0
	var werr error
	for i := range 11 {
		f := filepath.Join(dir, "mib"+strings.Repeat("x", i))
		if werr = btrfstest.WriteSynced(f, 1<<20); werr != nil {
			break
		}
		written++
	}
	if !errors.Is(werr, syscall.EDQUOT) || written != 10 {
		t.Fatalf("%d MiB written, then %v; want 10 MiB, then EDQUOT for the 11th", written, werr)
	}

	if _, err := p.SetUp(ctx, limited, dir); err != nil {
		t.Fatalf("second set-up: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "mib")); err != nil || inode(t, dir) != 256 {
		t.Fatalf("after a second set-up: %v, inode %d; want the same subvolume with its data", err, inode(t, dir))
	}
	if out := qgroups(t, root); !strings.Contains(out, "0/256") {
		t.Fatalf("qgroups before teardown:\n%s", out)
	}
	if err := p.TearDown(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after teardown: %v", err)
	}
	if out := qgroups(t, root); strings.Contains(out, "0/256") {
		t.Errorf("qgroup 0/256 left after teardown:\n%s", out)
	}

	plain := filepath.Join(filepath.Dir(dir), "plain")
	if _, err := p.SetUp(ctx, spec(v1.EmptyDirVolumeSource{}), plain); err != nil {
		t.Fatal(err)
	}
	found := filepath.Join(filepath.Dir(dir), "found")
	if err := os.Mkdir(found, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SetUp(ctx, limited, found); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{plain, found} {
		if ino := inode(t, d); ino == 256 {
			t.Errorf("%s is a subvolume, want a plain directory", d)
		}
		if err := p.TearDown(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSizeLimitOnBtrfsWithoutQuotas: quotas off, the volume is a plain
// directory (its usage is watched instead).
func TestSizeLimitOnBtrfsWithoutQuotas(t *testing.T) {
	root := btrfstest.Mount(t, false)
	p := &emptydir.Plugin{Mounter: mount.System{}, Limiter: emptydir.Btrfs{}}
	limit := resource.MustParse("10Mi")
	dir := filepath.Join(root, "scratch")
	if _, err := p.SetUp(context.Background(), spec(v1.EmptyDirVolumeSource{SizeLimit: &limit}), dir); err != nil {
		t.Fatal(err)
	}
	if ino := inode(t, dir); ino == 256 {
		t.Errorf("%s is a subvolume without quotas, want a plain directory", dir)
	}
	if err := p.TearDown(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
}

// TestSizeLimitOnBtrfsNestedSubvolume: a subvolume the pod made inside
// its volume (any user may) does not stop the teardown: btrfs refuses to
// delete the outer one at once, and the volume is emptied entry by entry
// (rmdir deletes an empty subvolume).
func TestSizeLimitOnBtrfsNestedSubvolume(t *testing.T) {
	root := btrfstest.Mount(t, true)
	ctx := context.Background()
	p := &emptydir.Plugin{Mounter: mount.System{}, Limiter: emptydir.Btrfs{}}
	limit := resource.MustParse("10Mi")
	dir := filepath.Join(root, "scratch")
	if _, err := p.SetUp(ctx, spec(v1.EmptyDirVolumeSource{SizeLimit: &limit}), dir); err != nil {
		t.Fatal(err)
	}
	nested := filepath.Join(dir, "inner")
	if out, err := exec.Command("btrfs", "subvolume", "create", nested).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume create: %v: %s", err, out)
	}
	if err := btrfstest.WriteSynced(filepath.Join(nested, "f"), 4096); err != nil {
		t.Fatal(err)
	}
	if err := p.TearDown(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after teardown: %v", err)
	}
}

// TestSizeLimitOnBtrfsNestedMount: a mount inside a limited volume is not
// deleted with the subvolume: the teardown leaves the tree to RemoveDir,
// which never crosses into a nested mount.
func TestSizeLimitOnBtrfsNestedMount(t *testing.T) {
	root := btrfstest.Mount(t, true)
	ctx := context.Background()
	p := &emptydir.Plugin{Mounter: mount.System{}, Limiter: emptydir.Btrfs{}}
	limit := resource.MustParse("10Mi")
	dir := filepath.Join(root, "scratch")
	if _, err := p.SetUp(ctx, spec(v1.EmptyDirVolumeSource{SizeLimit: &limit}), dir); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", other, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(other, syscall.MNT_DETACH) })
	kept := filepath.Join(other, "kept")
	if err := os.WriteFile(kept, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := p.TearDown(ctx, dir)
	if _, serr := os.Stat(kept); serr != nil {
		t.Fatalf("teardown (%v) deleted a file of a mount nested in the volume: %v", err, serr)
	}
	if err == nil {
		t.Error("teardown succeeded over a nested mount, want it refused")
	}
}

// TestSizeLimitOnBtrfsQuotasTurnedOff: quotas turned off while a limited
// volume exists do not stop its teardown.
func TestSizeLimitOnBtrfsQuotasTurnedOff(t *testing.T) {
	root := btrfstest.Mount(t, true)
	ctx := context.Background()
	p := &emptydir.Plugin{Mounter: mount.System{}, Limiter: emptydir.Btrfs{}}
	limit := resource.MustParse("10Mi")
	dir := filepath.Join(root, "scratch")
	if _, err := p.SetUp(ctx, spec(v1.EmptyDirVolumeSource{SizeLimit: &limit}), dir); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("btrfs", "quota", "disable", root).CombinedOutput(); err != nil {
		t.Fatalf("btrfs quota disable: %v: %s", err, out)
	}
	if err := p.TearDown(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after teardown: %v", err)
	}
}

// TestSizeLimitOnBtrfsCrashBeforeLimit: an agent killed between making
// the subvolume and limiting it leaves a subvolume without a limit; the
// next set-up limits it, without making it anew.
func TestSizeLimitOnBtrfsCrashBeforeLimit(t *testing.T) {
	root := btrfstest.Mount(t, true)
	ctx := context.Background()
	dir := filepath.Join(root, "scratch")
	if out, err := exec.Command("btrfs", "subvolume", "create", dir).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume create: %v: %s", err, out)
	}
	if err := btrfstest.WriteSynced(filepath.Join(dir, "before"), 1<<20); err != nil {
		t.Fatal(err)
	}
	p := &emptydir.Plugin{Mounter: mount.System{}, Limiter: emptydir.Btrfs{}}
	limit := resource.MustParse("4Mi")
	if _, err := p.SetUp(ctx, spec(v1.EmptyDirVolumeSource{SizeLimit: &limit}), dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "before")); err != nil {
		t.Fatalf("data of the subvolume: %v", err)
	}
	if err := btrfstest.WriteSynced(filepath.Join(dir, "more"), 4<<20); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("4 MiB more in a 4Mi volume holding 1 MiB: %v, want EDQUOT", err)
	}
	if err := p.TearDown(ctx, dir); err != nil {
		t.Fatal(err)
	}
}

// TestSizeLimitOnBtrfsQuotasOffAtRestart: a limited emptyDir found at a
// restart with quotas off is served as it is (the usage pass says its
// limit is not enforced), and a set-up once quotas are on makes its limit
// again.
func TestSizeLimitOnBtrfsQuotasOffAtRestart(t *testing.T) {
	root := btrfstest.Mount(t, true)
	ctx := context.Background()
	p := &emptydir.Plugin{Mounter: mount.System{}, Limiter: emptydir.Btrfs{}}
	limit := resource.MustParse("10Mi")
	limited := spec(v1.EmptyDirVolumeSource{SizeLimit: &limit})
	dir := filepath.Join(root, "pods", "uid", "volumes", "kubernetes.io~empty-dir", "scratch")
	if _, err := p.SetUp(ctx, limited, dir); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("btrfs", "quota", "disable", root).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if _, err := p.SetUp(ctx, limited, dir); err != nil {
		t.Fatalf("set-up with quotas off: %v; want the volume served", err)
	}
	if ino := inode(t, dir); ino != 256 {
		t.Fatalf("%s has inode %d, want the subvolume kept", dir, ino)
	}
	if out, err := exec.Command("btrfs", "quota", "enable", root).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if _, err := p.SetUp(ctx, limited, dir); err != nil {
		t.Fatal(err)
	}
	if err := btrfstest.WriteSynced(filepath.Join(dir, "big"), 12<<20); !errors.Is(err, syscall.EDQUOT) {
		t.Errorf("12 MiB into a 10Mi emptyDir once quotas are on again: %v, want EDQUOT", err)
	}
	if err := p.TearDown(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after teardown: %v", err)
	}
}

// TestMayHaveMadeTellsSubvolumes: a subvolume the Limiter made may be
// its; a plain directory on the same btrfs, a missing one and a symlink
// to a subvolume are not (their teardown skips Remove and its scan).
func TestMayHaveMadeTellsSubvolumes(t *testing.T) {
	root := btrfstest.Mount(t, true)
	ctx := context.Background()
	b := emptydir.Btrfs{}
	sub, plain := filepath.Join(root, "sub"), filepath.Join(root, "plain")
	if made, err := b.Create(ctx, sub, 1<<20); err != nil || !made {
		t.Fatalf("Create = %v, %v", made, err)
	}
	if err := os.Mkdir(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(sub, link); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]bool{sub: true, plain: false, filepath.Join(root, "missing"): false, link: false} {
		if got := b.MayHaveMade(dir); got != want {
			t.Errorf("MayHaveMade(%s) = %v, want %v", filepath.Base(dir), got, want)
		}
	}
	if removed, err := b.Remove(ctx, sub); err != nil || !removed {
		t.Fatalf("Remove = %v, %v", removed, err)
	}
}
