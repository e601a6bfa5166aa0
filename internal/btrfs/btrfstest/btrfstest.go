// Package btrfstest gives tests a real btrfs: a sparse image on a loop
// device, mounted in the test's temporary directory. It is for tests
// only, and needs root and btrfs-progs (test/deps.sh installs it); it
// never touches a file system it did not make.
package btrfstest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Size is the size of the file system Mount makes: room for the tests'
// volumes of a few MiB each and for btrfs's own metadata.
const Size = "300M"

// Mount makes a btrfs of Size on a loop device, mounted in a temporary
// directory, with quotas on when quotas is set, and returns its mount
// point. It skips the test without root or mkfs.btrfs. The cleanup
// unmounts it (lazily if it is busy); mount -o loop detaches the device.
func Mount(t testing.TB, quotas bool) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a loop-backed btrfs")
	}
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		t.Skip("needs mkfs.btrfs (btrfs-progs; test/deps.sh installs it)")
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil { //nolint:gosec // G301: a test's mount point
		t.Fatal(err)
	}
	run(t, "truncate", "-s", Size, img)
	run(t, "mkfs.btrfs", "-q", img)
	run(t, "mount", "-o", "loop", img, mnt)
	t.Cleanup(func() {
		if err := exec.Command("umount", mnt).Run(); err != nil { //nolint:gosec // G204: the test's own mount point
			_ = exec.Command("umount", "-l", mnt).Run() //nolint:gosec // G204: the test's own mount point
		}
	})
	if quotas {
		run(t, "btrfs", "quota", "enable", mnt)
	}
	return mnt
}

// WriteSynced writes n bytes to a new file and syncs it, so that a write
// past a qgroup limit fails here (EDQUOT) and the qgroup counts the file
// at the next commit.
func WriteSynced(path string, n int) error {
	f, err := os.Create(path) //nolint:gosec // G304: the test's own volume
	if err != nil {
		return err
	}
	_, err = f.Write(make([]byte, n))
	return errors.Join(err, f.Sync(), f.Close())
}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil { //nolint:gosec // G204: the test's own commands
		t.Fatalf("%v: %v: %s", args, err, out)
	}
}
