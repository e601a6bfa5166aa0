package btrfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// SubvolumeIno is the inode number of every btrfs subvolume's root
// directory (BTRFS_FIRST_FREE_OBJECTID): a plain directory on btrfs never
// has it (one on another file system may).
const SubvolumeIno = 256

// IsSubvolume reports whether dir is a btrfs subvolume, without following
// a symlink and without running btrfs(8); missing is false. Inode 256
// means a subvolume on btrfs only, so the file system is checked too.
func IsSubvolume(dir string) (bool, error) {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.IsDir() || st.Ino != SubvolumeIno {
		return false, nil
	}
	return onBtrfs(dir)
}

func onBtrfs(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	return st.Type == unix.BTRFS_SUPER_MAGIC, nil
}

// QuotasOn reports whether dir is on btrfs with quotas on.
func (t Tool) QuotasOn(ctx context.Context, dir string) (bool, error) {
	if err := absolute(dir); err != nil {
		return false, err
	}
	if ok, err := onBtrfs(dir); err != nil || !ok {
		return false, err
	}
	_, err := t.Run(ctx, "qgroup", "show", "--raw", dir)
	if errors.Is(err, ErrQuotasOff) {
		return false, nil
	}
	return err == nil, err
}

// EnableQuotas turns quotas on for the file system of dir.
func (t Tool) EnableQuotas(ctx context.Context, dir string) error {
	return t.at(ctx, dir, "quota", "enable", dir)
}

// CreateSubvolume makes dir a new subvolume.
func (t Tool) CreateSubvolume(ctx context.Context, dir string) error {
	return t.at(ctx, dir, "subvolume", "create", dir)
}

// DeleteSubvolume deletes the subvolume dir with all it holds, and
// commits. It fails with ErrNotEmpty when dir holds another subvolume.
func (t Tool) DeleteSubvolume(ctx context.Context, dir string) error {
	return t.at(ctx, dir, "subvolume", "delete", "--commit-after", dir)
}

// SubvolumeID returns the ID of the subvolume holding dir: its qgroup is
// 0/ID.
func (t Tool) SubvolumeID(ctx context.Context, dir string) (uint64, error) {
	if err := absolute(dir); err != nil {
		return 0, err
	}
	out, err := t.Run(ctx, "inspect-internal", "rootid", dir)
	if err != nil {
		return 0, err
	}
	id, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("subvolume ID of %s: %w", dir, err)
	}
	return id, nil
}

// SetLimit limits the bytes the subvolume dir references (data and
// metadata) to limit: writes past it fail with EDQUOT.
func (t Tool) SetLimit(ctx context.Context, dir string, limit int64) error {
	return t.at(ctx, dir, "qgroup", "limit", strconv.FormatInt(limit, 10), dir)
}

// Sync commits the file system of dir, which also wakes the cleaner that
// drops deleted subvolumes.
func (t Tool) Sync(ctx context.Context, dir string) error {
	return t.at(ctx, dir, "filesystem", "sync", dir)
}

// WaitDropped waits until the kernel has dropped the deleted subvolume id
// of the file system of dir, which it does only once no file in it is
// open.
func (t Tool) WaitDropped(ctx context.Context, dir string, id uint64) error {
	return t.at(ctx, dir, "subvolume", "sync", dir, strconv.FormatUint(id, 10))
}

// at runs btrfs(8) with args, dir among them, checked to be absolute.
func (t Tool) at(ctx context.Context, dir string, args ...string) error {
	if err := absolute(dir); err != nil {
		return err
	}
	_, err := t.Run(ctx, args...)
	return err
}
