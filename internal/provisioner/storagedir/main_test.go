package storagedir

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a real bind mount")
	}
}

// bindMount bind-mounts a fresh directory on target until the test ends.
func bindMount(t *testing.T, target string) {
	t.Helper()
	if err := unix.Mount(t.TempDir(), target, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount on %s: %v", target, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(target, 0); err != nil {
			t.Errorf("unmount %s: %v", target, err)
		}
	})
}

// tree lists every path below dir with its mode, for comparing before and after.
func tree(t *testing.T, dir string) map[string]os.FileMode {
	t.Helper()
	got := map[string]os.FileMode{}
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		got[path] = info.Mode()
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return got
}

// outsideDir makes a directory outside base holding one file, and returns
// it with a check that it is exactly as it was.
func outsideDir(t *testing.T) (string, func()) {
	t.Helper()
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "keep"))
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	before := tree(t, dir)
	return dir, func() {
		t.Helper()
		after := tree(t, dir)
		if len(after) != len(before) {
			t.Fatalf("outside %s changed: before %v, after %v", dir, before, after)
		}
		for p, m := range before {
			if after[p] != m {
				t.Fatalf("outside %s changed: before %v, after %v", dir, before, after)
			}
		}
	}
}

func mustWrite(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mustMkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
