package capacity

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const mi = 1 << 20

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: attaches loop devices and mounts file systems")
	}
}

func needTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (test/deps.sh installs it: btrfs-progs, e2fsprogs, util-linux)", tool)
		}
	}
}

func sh(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// btrfsRoot makes a loop-backed btrfs of 512 MiB with quotas on (unless
// quota is false), mounted in a temporary directory, and returns the
// mount. The cleanup unmounts it (mount -o loop detaches the device).
func btrfsRoot(t testing.TB, quota bool) string {
	t.Helper()
	return btrfsRootOf(t, quota, "512M")
}

// btrfsRootOf is btrfsRoot of size (truncate's units).
func btrfsRootOf(t testing.TB, quota bool, size string) string {
	t.Helper()
	needRoot(t)
	needTools(t, "btrfs", "mkfs.btrfs")
	dir := t.TempDir()
	img := filepath.Join(dir, "fs.img")
	sh(t, "truncate", "-s", size, img)
	sh(t, "mkfs.btrfs", "-q", img)
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	sh(t, "mount", "-o", "loop", img, mnt)
	t.Cleanup(func() {
		if err := exec.Command("umount", mnt).Run(); err != nil {
			_ = exec.Command("umount", "-l", mnt).Run()
		}
		for _, dev := range loopsOf(t, img) {
			_ = exec.Command("losetup", "-d", dev).Run()
		}
	})
	if quota {
		sh(t, "btrfs", "quota", "enable", mnt)
	}
	return mnt
}

// imageRoot is a temporary directory for image volumes; the cleanup
// unmounts and detaches whatever a failed test left there.
func imageRoot(t testing.TB) string {
	t.Helper()
	needRoot(t)
	needTools(t, "losetup", "blkid", "mkfs.ext4", "resize2fs")
	root := t.TempDir()
	t.Cleanup(func() {
		imgs, _ := filepath.Glob(filepath.Join(root, "*"+ImageSuffix))
		for _, img := range imgs {
			dir := strings.TrimSuffix(img, ImageSuffix)
			for unix.Unmount(dir, 0) == nil {
			}
			for _, dev := range loopsOf(t, img) {
				_ = exec.Command("losetup", "-d", dev).Run()
			}
		}
	})
	return root
}

// loopsOf lists the loop devices backed by img.
func loopsOf(t testing.TB, img string) []string {
	t.Helper()
	out, err := exec.Command("losetup", "--associated", img, "--noheadings", "--output", "NAME").Output()
	if err != nil {
		t.Errorf("losetup -j %s: %v", img, err)
	}
	return strings.Fields(string(out))
}

func open(t testing.TB, cfg Config) (Backend, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	cfg.Logger = zap.New(core)
	b, err := Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, logs
}

// fill writes 1 MiB chunks to f until n chunks are written or a write
// fails, and returns the bytes written and the error.
func fill(f *os.File, n int) (int64, error) {
	chunk := make([]byte, mi)
	for i := range chunk {
		chunk[i] = byte(i*7 + 1) // not zeros: nothing may compress or dedupe it
	}
	var total int64
	for range n {
		w, err := f.Write(chunk)
		total += int64(w)
		if err != nil {
			return total, err
		}
	}
	return total, f.Sync()
}

func create(t testing.TB, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func mountID(t testing.TB, path string) uint64 {
	t.Helper()
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &st); err != nil {
		t.Fatal(err)
	}
	return st.Mnt_id
}

func isErrno(err error, want unix.Errno) bool {
	var errno unix.Errno
	return errors.As(err, &errno) && errno == want
}
