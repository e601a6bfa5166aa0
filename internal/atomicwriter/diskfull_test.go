package atomicwriter

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// mountTinyTmpfs mounts a 64 KiB tmpfs on a fresh directory and unmounts it
// when the test ends.
func mountTinyTmpfs(t *testing.T) string {
	t.Helper()
	requireRoot(t, "the disk-full test (it mounts a 64 KiB tmpfs)")
	dir := filepath.Join(t.TempDir(), "tiny")
	must(t, os.Mkdir(dir, 0o755))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("skipping the disk-full test: cannot mount a tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

func TestWriteDiskFull(t *testing.T) {
	dir := mountTinyTmpfs(t)
	w := New(dir)
	mustWrite(t, w, map[string]File{"a": file("old-a", 0o644), "d/b": file("old-b", 0o644)})
	before := snapshot(t, dir)

	secret := bytes.Repeat([]byte("s3cr3t"), 20<<10) // 120 KiB, more than the tmpfs holds
	changed, err := w.Write(map[string]File{"a": file("new-a", 0o644), "d/b": {Data: secret, Mode: 0o600}})
	if changed || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Write = %v, %v; want false and ENOSPC", changed, err)
	}
	assertNoSecret(t, err, "s3cr3t")
	t.Logf("error: %v", err)
	assertSameSnapshot(t, before, snapshot(t, dir))
	assertContent(t, dir, "a", "old-a")
	assertContent(t, dir, "d/b", "old-b")

	// The space the failed write took was given back.
	mustWrite(t, w, map[string]File{"a": {Data: bytes.Repeat([]byte("n"), 40<<10), Mode: 0o644}})
	assertEntries(t, dir, dataTarget(t, dir), dataLink, "a")
}
