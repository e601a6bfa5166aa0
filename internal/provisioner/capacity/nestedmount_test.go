package capacity

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCopiesIgnoreMountsNestedInTheVolume: a bind mount of another
// volume's directory (same file system) on a directory inside a volume
// while it is snapshotted and cloned is not followed: the snapshot, the
// volume restored from it and the clone hold what the volume itself
// holds under the mount point, never the other volume's data, and the
// other volume is untouched when they are deleted.
func TestCopiesIgnoreMountsNestedInTheVolume(t *testing.T) {
	for _, image := range []bool{false, true} {
		name := map[bool]string{false: "btrfs", true: "image"}[image]
		t.Run(name, func(t *testing.T) {
			var root string
			if image {
				root = imageRoot(t)
			} else {
				root = btrfsRoot(t, true)
			}
			b, s := snapshotter(t, root, image)
			ctx := t.Context()
			dir, err := b.Create(ctx, "vol", 16*mi)
			if err != nil {
				t.Fatal(err)
			}
			other, err := b.Create(ctx, "other", 16*mi)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, "sub", "own"), 1)
			writeFile(t, filepath.Join(other, "secret"), 2)
			mnt := filepath.Join(dir, "sub")
			if err := unix.Mount(other, mnt, "", unix.MS_BIND, ""); err != nil {
				t.Fatal(err)
			}
			mounted := true
			defer func() {
				if mounted {
					_ = unix.Unmount(mnt, unix.MNT_DETACH)
				}
			}()
			if _, err := s.Snapshot(ctx, "vol", "snap"); err != nil {
				t.Fatal(err)
			}
			restored, err := s.CreateFrom(ctx, "restored", 16*mi, Source{Snapshot: "snap"})
			if err != nil {
				t.Fatal(err)
			}
			clone, err := s.CreateFrom(ctx, "clone", 16*mi, Source{Volume: "vol"})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{restored, clone} {
				sameContent(t, filepath.Join(d, "sub", "own"), 1)
				if _, err := os.Lstat(filepath.Join(d, "sub", "secret")); !os.IsNotExist(err) {
					t.Errorf("%s/sub holds the other volume's file (through the mount): %v", d, err)
				}
			}
			if err := unix.Unmount(mnt, 0); err != nil {
				t.Fatal(err)
			}
			mounted = false
			for _, n := range []string{"restored", "clone"} {
				if err := b.Delete(ctx, n); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.DeleteSnapshot(ctx, "snap"); err != nil {
				t.Fatal(err)
			}
			sameContent(t, filepath.Join(other, "secret"), 2)
			sameContent(t, filepath.Join(dir, "sub", "own"), 1)
			for _, n := range []string{"vol", "other"} {
				if err := b.Delete(ctx, n); err != nil {
					t.Fatal(err)
				}
			}
			checkEmpty(t, root, image)
		})
	}
}
