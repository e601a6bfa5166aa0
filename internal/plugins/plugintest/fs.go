package plugintest

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"

	"github.com/volume-agent/volume-agent/internal/mount"
)

// NeedRoot skips t unless it runs as root; why says what needs root.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root (%s); run the tests as root to cover it", why)
	}
}

// VolumeDir returns a volume directory, not yet created, below a fresh
// temporary directory. As root, a cleanup unmounts whatever a failed test
// left mounted below it before the temporary directory is removed.
func VolumeDir(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if os.Geteuid() == 0 {
		t.Cleanup(func() { UnmountAll(t, root) })
	}
	return filepath.Join(root, "pods", "uid", "volumes", "plugin~vol", "vol")
}

// UnmountAll unmounts every mount at or below dir, deepest first, as the
// kernel's mount table lists them (mount.System's MountsUnder does not
// enter mounts, so it would miss mounts nested in them).
func UnmountAll(t testing.TB, dir string) {
	t.Helper()
	ctx := context.Background()
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Errorf("list mounts below %s: %v", dir, err)
	}
	for i := len(infos) - 1; i >= 0; i-- {
		if err := (mount.System{}).Unmount(ctx, infos[i].Mountpoint); err != nil {
			t.Errorf("clean up: %v", err)
		}
	}
}

// Mounts returns the kernel's mount table entries at or below dir.
func Mounts(t *testing.T, dir string) []*mountinfo.Info {
	t.Helper()
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Fatalf("read mount table: %v", err)
	}
	return infos
}

// Tree describes every entry at or below dir without following symlinks:
// relative path → mode and file content or link target. A missing dir gives
// nil.
func Tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	var tree map[string]string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var content []byte
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			content = []byte("-> " + target)
			if err != nil {
				return err
			}
		case d.Type().IsRegular():
			if content, err = os.ReadFile(path); err != nil {
				return err
			}
		}
		if tree == nil {
			tree = map[string]string{}
		}
		rel, _ := filepath.Rel(dir, path)
		tree[rel] = info.Mode().String() + " " + string(content)
		return nil
	})
	if err != nil && !(os.IsNotExist(err) && tree == nil) {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return tree
}

// WriteFile writes data to path, creating its parent directories, or fails t.
func WriteFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ReadFile returns the content of path or fails t.
func ReadFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// mountCalls counts the mounts made on dir: the mounts a Fake recorded
// there, or the entries at dir in the kernel's mount table.
func mountCalls(t *testing.T, m mount.Mounter, dir string) int {
	t.Helper()
	if f, ok := m.(*mount.Fake); ok {
		n := 0
		for _, line := range f.Calls() {
			if strings.HasPrefix(line, "mount ") && strings.HasSuffix(line, " "+dir) {
				n++
			}
		}
		return n
	}
	n := 0
	for _, info := range Mounts(t, dir) {
		if info.Mountpoint == dir {
			n++
		}
	}
	return n
}

// LoopDevice attaches an empty 32 MiB file to a loop device and returns the
// device; it is detached when the test ends. It fails t when no loop
// device can be attached.
func LoopDevice(t *testing.T) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "--detach", dev).Run() })
	return dev
}

// NeedNoSwap skips t unless it runs as root on a kernel that mounts a
// tmpfs with noswap (Linux 6.4 and later).
func NeedNoSwap(t testing.TB) {
	t.Helper()
	NeedRoot(t, "mounts a tmpfs with noswap")
	if err := mount.ProbeNoSwap(""); err != nil {
		t.Skipf("skipped: %v", err)
	}
}
