package emptydir

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/btrfs"
)

// Limiter makes a disk emptyDir with a sizeLimit a directory whose file
// system enforces the limit. What it made must be recognisable on disk
// alone, so that a restart finds it again and never makes it anew.
type Limiter interface {
	// Create makes dir, limited to size bytes; made is false, with dir
	// not made, where dir's file system cannot limit it.
	Create(ctx context.Context, dir string, size int64) (made bool, err error)
	// Limit sets the limit of an existing dir again (after a restart)
	// if Create made it, and reports whether it did.
	Limit(ctx context.Context, dir string, size int64) (limited bool, err error)
	// Remove deletes dir and its limit if Create made it, and reports
	// whether it did: removed is false for any other directory, which
	// the caller removes.
	Remove(ctx context.Context, dir string) (removed bool, err error)
	// MayHaveMade reports whether dir may be one Create made, from
	// attributes the kernel has cached (whatever is mounted on dir is
	// not asked, so it cannot hang): false only for a directory Remove
	// would not remove, which then needs neither Remove nor the scan for
	// mounts that must come before it.
	MayHaveMade(dir string) bool
}

// Btrfs is the Limiter of a root directory on btrfs with quotas on: each
// limited emptyDir is a subvolume whose qgroup (with every subvolume a
// pod makes inside it limited to the room left: see btrfs.Tool.Enforce)
// limits the bytes they reference (data and metadata, so a little less than size of file data
// fits; writes past it fail with EDQUOT). A subvolume is told from a plain
// directory by its inode number (256) on btrfs, and its qgroup by its
// subvolume ID, so nothing is recorded elsewhere. Paths given to btrfs(8)
// are absolute, so none is read as an option.
type Btrfs struct {
	// Timeout bounds each run of btrfs(8); default DefaultBtrfsTimeout.
	Timeout time.Duration
}

// DefaultBtrfsTimeout is Btrfs.Timeout's default.
const DefaultBtrfsTimeout = btrfs.DefaultTimeout

var _ Limiter = Btrfs{}

func (b Btrfs) tool() btrfs.Tool { return btrfs.Tool{Timeout: b.Timeout} }

// Create makes dir a subvolume with a qgroup limit, if dir's parent is on
// btrfs with quotas on. A failure after the subvolume was made leaves it
// for the caller's rollback (Remove).
func (b Btrfs) Create(ctx context.Context, dir string, size int64) (bool, error) {
	if !filepath.IsAbs(dir) {
		return false, fmt.Errorf("emptyDir path %s is not absolute", dir)
	}
	on, err := b.tool().QuotasOn(ctx, filepath.Dir(dir))
	if errors.Is(err, exec.ErrNotFound) {
		return false, nil // no btrfs(8): a plain directory, watched
	}
	if err != nil || !on {
		return false, err // quotas off: a plain directory, watched
	}
	if err := b.tool().CreateSubvolume(ctx, dir); err != nil {
		return false, err
	}
	return true, b.limit(ctx, dir, size)
}

// Limit sets the qgroup limit of dir again if it is a subvolume: turning
// quotas off and on drops every limit. With quotas off the volume is
// served as it is: the usage pass says on it that its limit is not
// enforced, and makes the limit again once quotas are on.
func (b Btrfs) Limit(ctx context.Context, dir string, size int64) (bool, error) {
	if sub, err := btrfs.IsSubvolume(dir); err != nil || !sub {
		return false, err
	}
	if err := b.limit(ctx, dir, size); !errors.Is(err, btrfs.ErrQuotasOff) {
		return true, err
	}
	return true, nil
}

// Remove deletes dir if it is a subvolume, with every subvolume a pod made
// inside it (any user may make one), each by its ID: btrfs drops the whole
// tree at once. On a kernel older than 6.7, which leaves them, it
// destroys the qgroups once the kernel has dropped the subvolumes; a
// crash before that leaves those behind, empty.
func (b Btrfs) Remove(ctx context.Context, dir string) (bool, error) {
	if sub, err := btrfs.IsSubvolume(dir); err != nil || !sub || !filepath.IsAbs(dir) {
		return false, err
	}
	id, err := b.tool().SubvolumeID(ctx, dir)
	if err != nil {
		return false, err
	}
	parent := filepath.Dir(dir)
	var nested []uint64
	if err := b.tool().DeleteTree(ctx, dir, func(ids []uint64) error { nested = append(nested, ids...); return nil }); err != nil {
		return false, err
	}
	for _, sub := range append(nested, id) {
		if err := b.destroyQgroup(ctx, parent, sub); err != nil {
			return true, err
		}
	}
	return true, nil
}

// MayHaveMade reports whether dir is a directory with a subvolume's inode
// number (256), by statx with AT_STATX_DONT_SYNC: every subvolume has
// it, and a plain directory on btrfs never does. Remove then checks the
// file system too. A missing dir, or one that cannot be looked at, is
// not one (Remove would not remove it either).
func (Btrfs) MayHaveMade(dir string) bool {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE|unix.STATX_INO, &st)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Ino == btrfs.SubvolumeIno
}

// limit makes dir, with every subvolume inside dir, limited to size and
// room for metadata (btrfs.Tool.Enforce).
func (b Btrfs) limit(ctx context.Context, dir string, size int64) error {
	_, err := b.tool().Enforce(ctx, dir, QgroupLimit(size))
	return err
}

// QgroupLimit is the qgroup limit that lets a volume hold size bytes of
// data. A qgroup also counts the subvolume's own metadata (its tree
// blocks, and the reservation for writes in flight): with the limit at
// exactly 10 MiB, the 10th MiB of data was refused. Half a MiB plus 1/256
// of the size covers that (measured on Linux 6.18: with 10 MiB + 512 KiB,
// ten 1 MiB files fit and the 11th is refused), and lets a volume hold at
// most 0.4 % (plus 512 KiB) more than its sizeLimit.
func QgroupLimit(size int64) int64 { return size + 512<<10 + size/256 }

// destroyQgroup destroys qgroup 0/id of the file system of dir, unless the
// kernel did with the subvolume.
func (b Btrfs) destroyQgroup(ctx context.Context, dir string, id uint64) error {
	if err := b.tool().WaitDropped(ctx, dir, id); err != nil {
		return err
	}
	listed, err := b.tool().HasQgroup(ctx, dir, id)
	if errors.Is(err, btrfs.ErrQuotasOff) {
		return nil // quotas turned off since: no qgroup is left
	}
	if err != nil || !listed {
		return err
	}
	return b.tool().DestroyQgroup(ctx, dir, id)
}
