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
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/mount"
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

// DeleteSubvolumeID deletes subvolume id of the file system of dir by its
// ID (BTRFS_IOC_SNAP_DESTROY_V2 with BTRFS_SUBVOL_SPEC_BY_ID, on dir
// opened without following a symlink: no path a tenant could swap is
// looked up), within Timeout, like a run of btrfs(8). The deletion is
// committed with the next transaction (Sync). It fails with ErrNotEmpty
// when the subvolume holds another one.
func (t Tool) DeleteSubvolumeID(ctx context.Context, dir string, id uint64) error {
	if err := absolute(dir); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout())
	defer cancel()
	_, err := mount.Bounded(ctx, func() (struct{}, error) { return struct{}{}, destroyByID(dir, id) })
	if errors.Is(err, unix.ENOTEMPTY) {
		return fmt.Errorf("delete subvolume %d: %w: %w", id, ErrNotEmpty, err)
	}
	if err != nil {
		return fmt.Errorf("delete subvolume %d: %w", id, err)
	}
	return nil
}

// iocSnapDestroyV2 is BTRFS_IOC_SNAP_DESTROY_V2: _IOW(0x94, 63, 4096).
const iocSnapDestroyV2 = 0x5000943f

// subvolSpecByID is BTRFS_SUBVOL_SPEC_BY_ID.
const subvolSpecByID = 1 << 4

// volArgsV2 is struct btrfs_ioctl_vol_args_v2 with its last union as the
// subvolume ID.
type volArgsV2 struct {
	Fd       int64
	TransID  uint64
	Flags    uint64
	_        [4]uint64
	SubvolID uint64
	_        [4040 - 8]byte
}

func destroyByID(dir string, id uint64) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd) //nolint:errcheck // read only
	args := volArgsV2{Flags: subvolSpecByID, SubvolID: id}
	if err := ioctl(fd, iocSnapDestroyV2, unsafe.Pointer(&args)); err != nil { //nolint:gosec // G103: the kernel's ioctl argument, sized as its request number says (TestIoctlArgSizes)
		return &os.PathError{Op: "BTRFS_IOC_SNAP_DESTROY_V2", Path: dir, Err: err}
	}
	return nil
}

// Snapshot makes dst a snapshot of the subvolume src, read-only when
// readOnly. It is not recursive: a subvolume inside src is an empty
// directory in the snapshot. btrfs(8) commits the snapshot, so the
// qgroup of the new subvolume counts what it references at once.
func (t Tool) Snapshot(ctx context.Context, src, dst string, readOnly bool) error {
	if err := absolute(src); err != nil {
		return err
	}
	args := []string{"subvolume", "snapshot"}
	if readOnly {
		args = append(args, "-r")
	}
	return t.at(ctx, dst, append(args, src, dst)...)
}
