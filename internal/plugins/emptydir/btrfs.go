package emptydir

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/mount"
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
}

// Btrfs is the Limiter of a root directory on btrfs with quotas on: each
// limited emptyDir is a subvolume whose qgroup limits the bytes it
// references (data and metadata, so a little less than size of file data
// fits; writes past it fail with EDQUOT). A subvolume is told from a plain
// directory by its inode number (256) on btrfs, and its qgroup by its
// subvolume ID, so nothing is recorded elsewhere. Paths given to btrfs(8)
// are absolute, so none is read as an option.
type Btrfs struct {
	// Timeout bounds each run of btrfs(8); default DefaultBtrfsTimeout.
	Timeout time.Duration
}

// DefaultBtrfsTimeout is Btrfs.Timeout's default.
const DefaultBtrfsTimeout = 30 * time.Second

var _ Limiter = Btrfs{}

// subvolumeIno is the inode number of every btrfs subvolume's root
// directory (BTRFS_FIRST_FREE_OBJECTID): a plain directory never has it.
const subvolumeIno = 256

// Create makes dir a subvolume with a qgroup limit, if dir's parent is on
// btrfs with quotas on. A failure after the subvolume was made leaves it
// for the caller's rollback (Remove).
func (b Btrfs) Create(ctx context.Context, dir string, size int64) (bool, error) {
	if !filepath.IsAbs(dir) {
		return false, fmt.Errorf("emptyDir path %s is not absolute", dir)
	}
	if ok, err := b.quotasOn(ctx, filepath.Dir(dir)); err != nil || !ok {
		return false, err
	}
	if _, err := b.run(ctx, "subvolume", "create", dir); err != nil {
		return false, err
	}
	return true, b.limit(ctx, dir, size)
}

// Limit sets the qgroup limit of dir again if it is a subvolume: turning
// quotas off and on drops every limit.
func (b Btrfs) Limit(ctx context.Context, dir string, size int64) (bool, error) {
	if sub, err := isSubvolume(dir); err != nil || !sub {
		return false, err
	}
	return true, b.limit(ctx, dir, size)
}

// Remove deletes dir if it is a subvolume: btrfs drops the whole tree at
// once. A subvolume that holds another one (any user may make one) is
// left to the caller, which empties it entry by entry (rmdir deletes an
// empty subvolume). The qgroup goes with the subvolume (Linux 6.7 and
// later); on an older kernel it is destroyed once the kernel has dropped
// the subvolume, and a crash in between leaves an empty qgroup behind.
func (b Btrfs) Remove(ctx context.Context, dir string) (bool, error) {
	if sub, err := isSubvolume(dir); err != nil || !sub || !filepath.IsAbs(dir) {
		return false, err
	}
	id, err := b.rootID(ctx, dir)
	if err != nil {
		return false, err
	}
	_, err = b.run(ctx, "subvolume", "delete", "--commit-after", dir)
	var te *toolError
	if errors.As(err, &te) && strings.Contains(te.stderr, "Directory not empty") {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, b.destroyQgroup(ctx, filepath.Dir(dir), id)
}

// quotasOn reports whether dir is on btrfs with quotas on.
func (b Btrfs) quotasOn(ctx context.Context, dir string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	if st.Type != unix.BTRFS_SUPER_MAGIC {
		return false, nil
	}
	_, err := b.run(ctx, "qgroup", "show", "--raw", dir)
	var te *toolError
	if errors.Is(err, exec.ErrNotFound) || (errors.As(err, &te) && strings.Contains(te.stderr, "not enabled")) {
		return false, nil // no btrfs(8), or quotas off: a plain directory, watched
	}
	return err == nil, err
}

func (b Btrfs) limit(ctx context.Context, dir string, size int64) error {
	_, err := b.run(ctx, "qgroup", "limit", strconv.FormatInt(qgroupLimit(size), 10), dir)
	return err
}

// qgroupLimit is the qgroup limit that lets a volume hold size bytes of
// data. A qgroup also counts the subvolume's own metadata (its tree
// blocks, and the reservation for writes in flight): with the limit at
// exactly 10 MiB, the 10th MiB of data was refused. Half a MiB plus 1/256
// of the size covers that (measured on Linux 6.18: with 10 MiB + 512 KiB,
// ten 1 MiB files fit and the 11th is refused), and lets a volume hold at
// most 0.4 % (plus 512 KiB) more than its sizeLimit.
func qgroupLimit(size int64) int64 { return size + 512<<10 + size/256 }

// destroyQgroup destroys qgroup 0/id of the file system of dir, unless the
// kernel did with the subvolume.
func (b Btrfs) destroyQgroup(ctx context.Context, dir string, id uint64) error {
	ids := strconv.FormatUint(id, 10)
	if _, err := b.run(ctx, "subvolume", "sync", dir, ids); err != nil {
		return err
	}
	out, err := b.run(ctx, "qgroup", "show", "--raw", dir)
	var te *toolError
	if errors.As(err, &te) && strings.Contains(te.stderr, "not enabled") {
		return nil // quotas turned off since: no qgroup is left
	}
	if err != nil || !listsQgroup(out, "0/"+ids) {
		return err
	}
	_, err = b.run(ctx, "qgroup", "destroy", "0/"+ids, dir)
	if errors.As(err, &te) && strings.Contains(te.stderr, "No such file or directory") {
		return nil // the kernel destroyed it since it was listed
	}
	return err
}

// listsQgroup reports whether the output of btrfs qgroup show has a row
// for qgroup id.
func listsQgroup(out, id string) bool {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == id {
			return true
		}
	}
	return false
}

func (b Btrfs) rootID(ctx context.Context, dir string) (uint64, error) {
	out, err := b.run(ctx, "inspect-internal", "rootid", dir)
	if err != nil {
		return 0, err
	}
	id, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("subvolume ID of %s: %w", dir, err)
	}
	return id, nil
}

// isSubvolume reports whether dir is a btrfs subvolume, without following
// a symlink; missing is false. Inode 256 means a subvolume on btrfs only.
func isSubvolume(dir string) (bool, error) {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.IsDir() || st.Ino != subvolumeIno {
		return false, nil
	}
	var fsst unix.Statfs_t
	if err := unix.Statfs(dir, &fsst); err != nil {
		return false, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return fsst.Type == unix.BTRFS_SUPER_MAGIC, nil
}

// toolError is a failed run of btrfs(8), with what it said.
type toolError struct {
	cmd    string
	stderr string
	err    error
}

func (e *toolError) Error() string { return fmt.Sprintf("%s: %v: %s", e.cmd, e.err, e.stderr) }

func (e *toolError) Unwrap() error { return e.err }

// run runs btrfs with args as argv (never through a shell) within the
// timeout, given up on like a stuck mount (mount.Bounded), and returns its
// standard output.
func (b Btrfs) run(ctx context.Context, args ...string) (string, error) {
	timeout := b.Timeout
	if timeout <= 0 {
		timeout = DefaultBtrfsTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "btrfs", args...) //nolint:gosec // G204: a fixed tool; paths are separate, absolute argv entries
	cmd.WaitDelay = 2 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_, err := mount.Bounded(ctx, func() (struct{}, error) { return struct{}{}, cmd.Run() })
	if ctxErr := ctx.Err(); ctxErr != nil {
		return "", &toolError{cmd: "btrfs " + strings.Join(args, " "), err: ctxErr}
	}
	if err != nil {
		return "", &toolError{cmd: "btrfs " + strings.Join(args, " "), stderr: mount.Fold(stderr.String()), err: err}
	}
	return stdout.String(), nil
}
