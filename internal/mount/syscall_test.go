package mount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseOptions(t *testing.T) {
	for _, tc := range []struct {
		m         Mount
		flags     uintptr
		data      string
		wantError string
	}{
		{m: Mount{Type: "tmpfs", Options: []string{"size=1m", "mode=0700", "uid=1", "gid=2", "nr_inodes=9"}}, data: "size=1m,mode=0700,uid=1,gid=2,nr_inodes=9"},
		{m: Mount{Type: "tmpfs", Options: []string{"ro", "nosuid", "nodev", "noexec", "noatime"}},
			flags: unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME},
		{m: Mount{Type: "tmpfs", Options: []string{"ro", "rw", "defaults"}}},
		{m: Mount{Type: "none", Options: []string{"bind", "ro", "nosuid"}}, flags: unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID},
		{m: Mount{Type: "none", Options: []string{"bind", "rw"}}, flags: unix.MS_BIND},
		{m: Mount{Type: "none", Options: []string{"bind", "size=1m"}}, wantError: `"size=1m" has no meaning for a bind mount`},
		{m: Mount{Type: "none", Options: []string{"bind", "sync"}}, wantError: "belong to the file system"},
		{m: Mount{Type: "tmpfs", Options: []string{"bogus"}}, wantError: `unknown mount option "bogus"`},
		{m: Mount{Type: "tmpfs", Options: []string{"size=1m,nosuid"}}, wantError: "holds a comma"},
		{m: Mount{Type: "none", Options: []string{"bind", "discard"}}, wantError: `"discard" has no meaning for a bind mount`},
		{m: Mount{Type: "ext4", Options: []string{"discard"}}, wantError: `unknown mount option "discard" for a ext4 mount`},
	} {
		s, err := parseOptions(tc.m)
		if tc.wantError != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantError) {
				t.Errorf("parseOptions(%v) = %v, want an error with %q", tc.m, err, tc.wantError)
			}
			continue
		}
		if err != nil || s.flags != tc.flags || s.data != tc.data {
			t.Errorf("parseOptions(%v) = %#x %q %v; want %#x %q", tc.m, s.flags, s.data, err, tc.flags, tc.data)
		}
	}
}

func TestSystemMountTmpfsAppliesOptions(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	m := Mount{Type: "tmpfs", Source: "tmpfs", Options: []string{"size=1m", "mode=0710", "nosuid", "noexec"}}
	if err := (System{}).Mount(ctx, m, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.TMPFS_MAGIC || uint64(st.Blocks)*uint64(st.Bsize) != 1<<20 {
		t.Errorf("mounted fs type %#x of %d bytes, want a tmpfs of 1 MiB", st.Type, uint64(st.Blocks)*uint64(st.Bsize))
	}
	if want := int64(unix.ST_NOSUID | unix.ST_NOEXEC); st.Flags&want != want {
		t.Errorf("mount flags %#x, want nosuid and noexec", st.Flags)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o710 {
		t.Errorf("tmpfs root: %v, %v; want mode 0710", fi, err)
	}
}

// bindSource returns a directory with a file in it, on a tmpfs mounted
// nosuid and nodev, to bind-mount from.
func bindSource(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	if err := unix.Mount("tmpfs", src, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(src, unix.MNT_DETACH) })
	mustWrite(t, filepath.Join(src, "data"))
	return src
}

// A read-only bind mount is read-only, keeps the restrictions of its
// source, and leaves the source writable.
func TestSystemBindMountReadOnly(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	src, dir := bindSource(t), t.TempDir()
	if err := (System{}).Mount(ctx, Mount{Type: "none", Source: src, Options: []string{"bind", "ro", "noexec"}}, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte("y"), 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write through the read-only bind mount: %v, want EROFS", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if want := int64(unix.ST_RDONLY | unix.ST_NOEXEC | unix.ST_NOSUID | unix.ST_NODEV); st.Flags&want != want {
		t.Errorf("bind mount flags %#x, want ro and noexec, and nosuid and nodev kept from the source", st.Flags)
	}
	if err := os.WriteFile(filepath.Join(src, "data"), []byte("y"), 0o644); err != nil {
		t.Errorf("the source became read-only too: %v", err)
	}
}

// When the bind remount fails, the bind mount is taken off again: a mount
// asked to be read-only is never left writable.
func TestSystemBindMountRollsBackWhenTheRemountFails(t *testing.T) {
	needRoot(t)
	boom := errors.New("remount refused")
	remount = func(string, uintptr) error { return boom }
	t.Cleanup(func() { remount = remountBind })
	src, dir := bindSource(t), t.TempDir()
	err := (System{}).Mount(context.Background(), Mount{Type: "none", Source: src, Options: []string{"bind", "ro"}}, dir)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "taken off again") {
		t.Fatalf("Mount = %v, want the remount's error saying the bind was taken off", err)
	}
	if mounted, err := isMountPoint(dir); err != nil || mounted {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		t.Fatalf("after a failed remount: mounted = %v, %v; want the bind mount gone", mounted, err)
	}
}

// An option mount(2) would drop is an error, and nothing is mounted.
func TestSystemMountRefusesOptionsItWouldDrop(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	for _, m := range []Mount{
		{Type: "none", Source: t.TempDir(), Options: []string{"bind", "size=1m"}},
		{Type: "tmpfs", Source: "tmpfs", Options: []string{"bogus"}},
	} {
		if err := (System{}).Mount(ctx, m, dir); err == nil {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
			t.Errorf("Mount(%v) succeeded, want an error", m)
		}
		if mounted, err := isMountPoint(dir); err != nil || mounted {
			t.Errorf("after Mount(%v): mounted = %v, %v; want nothing mounted", m, mounted, err)
		}
	}
}

// Unmount never follows a symlink: a planted symlink to a mount point does
// not unmount what it points to.
func TestSystemUnmountDoesNotFollowASymlink(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	if err := (System{}).Mount(ctx, tmpfs, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	link := filepath.Join(t.TempDir(), "link")
	mustSymlink(t, dir, link)
	if err := (System{}).Unmount(ctx, link); err == nil {
		t.Error("Unmount through a symlink succeeded, want an error")
	}
	if mounted, err := isMountPoint(dir); err != nil || !mounted {
		t.Errorf("mount behind the symlink: mounted = %v, %v; want it kept", mounted, err)
	}
}
