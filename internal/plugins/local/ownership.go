package local

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// Modes the kubelet adds for an fsGroup on a writable volume.
const (
	groupRW   = 0o660 // files and directories: owner and group read and write
	groupExec = 0o110 // directories: owner and group search
)

// setOwnership gives the group gid the volume at dir, as the kubelet does
// for a writable volume with an fsGroup: every file and directory belongs
// to the group and is group read-write, and directories are setgid so new
// files inherit the group. With policy OnRootMismatch nothing is walked
// when dir already looks done. Symlinks are re-owned, never followed, and
// the walk never crosses into another mount.
func setOwnership(dir string, gid int64, policy v1.PodFSGroupChangePolicy) error {
	if policy == v1.FSGroupChangeOnRootMismatch && ownedBy(dir, gid) {
		return nil
	}
	top, err := mountID(dir)
	if err != nil {
		return err
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != dir {
			id, err := mountID(p)
			if err != nil {
				return err
			}
			if id != top {
				return fs.SkipDir // a mount below: not ours to change
			}
		}
		return ownOne(p, d, gid)
	})
}

// ownOne gives one entry the group and the modes.
func ownOne(p string, d fs.DirEntry, gid int64) error {
	if err := os.Lchown(p, -1, int(gid)); err != nil {
		return fmt.Errorf("chown %s: %w", p, err)
	}
	if d.Type()&fs.ModeSymlink != 0 {
		return nil // chmod would follow it
	}
	info, err := d.Info()
	if err != nil {
		return err
	}
	mode := info.Mode() | groupRW
	if d.IsDir() {
		mode |= groupExec | fs.ModeSetgid
	}
	if mode == info.Mode() {
		return nil
	}
	if err := os.Chmod(p, mode); err != nil {
		return fmt.Errorf("chmod %s: %w", p, err)
	}
	return nil
}

// ownedBy reports whether dir already belongs to gid with the modes set.
func ownedBy(dir string, gid int64) bool {
	var st unix.Stat_t
	if unix.Lstat(dir, &st) != nil {
		return false
	}
	want := uint32(groupRW | groupExec | unix.S_ISGID)
	return int64(st.Gid) == gid && st.Mode&want == want
}

// mountID returns the mount ID of p, without following a symlink.
func mountID(p string) (uint64, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", p, err)
	}
	return st.Mnt_id, nil
}
