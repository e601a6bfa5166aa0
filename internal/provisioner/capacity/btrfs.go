package capacity

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// subvolumeIno is the inode number of every btrfs subvolume's root
// directory (BTRFS_FIRST_FREE_OBJECTID): a plain directory never has it.
const subvolumeIno = 256

// dropTimeout bounds the wait for the kernel to drop a deleted subvolume,
// which it does only once no file in it is open.
const dropTimeout = 30 * time.Second

// errNotDropped: a deleted subvolume's qgroup can be destroyed only once
// the kernel has dropped the subvolume.
var errNotDropped = errors.New("the kernel has not dropped the deleted subvolume yet (is a file in it still open?); the next attempt finishes the deletion")

// btrfsDriver makes each volume a subvolume limited by its qgroup. Paths
// given to btrfs(8) are absolute, so none is read as an option (btrfs(8)
// does not take "--" everywhere).
type btrfsDriver struct {
	root string
	mode os.FileMode
	run  runner
}

var _ driver = (*btrfsDriver)(nil)

// newBtrfs checks that quotas are on for root, turning them on when cfg
// allows it.
func newBtrfs(ctx context.Context, cfg Config) (*btrfsDriver, error) {
	b := &btrfsDriver{root: cfg.Root, mode: cfg.VolumeMode, run: runner{timeout: cfg.Timeout}}
	_, err := b.run.run(ctx, "btrfs", "qgroup", "show", "--raw", b.root)
	var te *toolError
	switch {
	case err == nil:
		return b, nil
	case !errors.As(err, &te) || !strings.Contains(te.stderr, "not enabled"):
		return nil, fmt.Errorf("check btrfs quotas on local path root %s: %w", b.root, err)
	case !cfg.EnableBtrfsQuota:
		return nil, fmt.Errorf("btrfs quotas are off on the local path root %s: turn them on (btrfs quota enable %s) to enforce volume sizes", b.root, b.root)
	}
	if _, err := b.run.run(ctx, "btrfs", "quota", "enable", b.root); err != nil {
		return nil, fmt.Errorf("turn on btrfs quotas on local path root %s: %w", b.root, err)
	}
	cfg.Logger.Info("turned on btrfs quotas on the local path root", zap.String("root", b.root))
	return b, nil
}

func (b *btrfsDriver) kind() string { return "btrfs" }

func (b *btrfsDriver) dir(v *record) string { return filepath.Join(b.root, v.Name) }

func (b *btrfsDriver) exists(v *record) (bool, error) { return lexists(b.dir(v)) }

func (b *btrfsDriver) create(ctx context.Context, v *record, save func() error) error {
	dir := b.dir(v)
	sub, err := isSubvolume(dir)
	if err != nil {
		return err
	}
	if !sub {
		if _, err := b.run.run(ctx, "btrfs", "subvolume", "create", dir); err != nil {
			return err
		}
	}
	id, err := b.rootID(ctx, dir)
	if err != nil {
		return err
	}
	if v.ID != id {
		v.ID = id
		if err := save(); err != nil {
			return err
		}
	}
	if err := b.limit(ctx, v); err != nil {
		return err
	}
	return os.Chmod(dir, b.mode)
}

func (b *btrfsDriver) expand(ctx context.Context, v *record) error { return b.limit(ctx, v) }

// attach checks the subvolume is there and sets its limit again: turning
// quotas off and on drops every limit.
func (b *btrfsDriver) attach(ctx context.Context, v *record) error {
	id, err := b.rootID(ctx, b.dir(v))
	if err != nil {
		return err
	}
	if id != v.ID {
		return fmt.Errorf("%s is subvolume %d, not %d as recorded", b.dir(v), id, v.ID)
	}
	return b.limit(ctx, v)
}

func (b *btrfsDriver) limit(ctx context.Context, v *record) error {
	_, err := b.run.run(ctx, "btrfs", "qgroup", "limit", strconv.FormatInt(v.Size, 10), b.dir(v))
	return err
}

// usage reads the subvolume's qgroup. The kernel updates qgroups when it
// commits a transaction (every 30 s by default, or on sync), so the
// figures may lag the writes by that much.
func (b *btrfsDriver) usage(ctx context.Context, v *record) (Usage, error) {
	out, err := b.run.run(ctx, "btrfs", "qgroup", "show", "--raw", "-re", "-f", b.dir(v))
	if err != nil {
		return Usage{}, err
	}
	used, err := referenced(out, v.ID)
	if err != nil {
		return Usage{}, err
	}
	return Usage{CapacityBytes: v.Size, UsedBytes: used, AvailableBytes: max(0, v.Size-used)}, nil
}

// taken is the subvolume's referenced bytes, as its qgroup counts them.
func (b *btrfsDriver) taken(ctx context.Context, v *record) (int64, error) {
	u, err := b.usage(ctx, v)
	return u.UsedBytes, err
}

// referenced finds the referenced bytes of qgroup 0/id in the output of
// btrfs qgroup show --raw: the row whose first column is 0/id.
func referenced(out string, id uint64) (int64, error) {
	want := "0/" + strconv.FormatUint(id, 10)
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == want {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("qgroup %s: referenced bytes %q: %w", want, f[1], err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("qgroup %s is not listed by btrfs qgroup show", want)
}

// remove deletes the subvolume, waits for the kernel to drop it, then
// destroys its qgroup unless the kernel did (Linux 6.7 and later do).
func (b *btrfsDriver) remove(ctx context.Context, v *record, save func() error) error {
	dir := b.dir(v)
	sub, err := isSubvolume(dir)
	if err != nil {
		return err
	}
	if sub {
		id, err := b.rootID(ctx, dir)
		if err != nil {
			return err
		}
		if v.ID != 0 && id != v.ID {
			return fmt.Errorf("%s is subvolume %d, not %d as recorded; leaving it", dir, id, v.ID)
		}
		v.ID = id
		if err := save(); err != nil { // the qgroup's name, for after a crash
			return err
		}
		if err := b.deleteTree(ctx, v, dir, save); err != nil {
			return err
		}
	} else if ok, err := lexists(dir); err != nil || ok {
		return errors.Join(err, fmt.Errorf("%s is not a subvolume; leaving it", dir))
	}
	for _, id := range append(v.Nested, v.ID) {
		if id == 0 {
			continue // never made
		}
		if err := b.destroyQgroup(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// deleteTree deletes the subvolume dir. Any user may create a subvolume
// inside it, which btrfs refuses to delete it over: those are deleted
// first, deepest first, their IDs written down for their qgroups.
func (b *btrfsDriver) deleteTree(ctx context.Context, v *record, dir string, save func() error) error {
	_, err := b.run.run(ctx, "btrfs", "subvolume", "delete", "--commit-after", dir)
	var te *toolError
	if err == nil || !errors.As(err, &te) || !strings.Contains(te.stderr, "Directory not empty") {
		return err
	}
	nested, err := nestedSubvolumes(dir)
	if err != nil {
		return err
	}
	for i := len(nested) - 1; i >= 0; i-- {
		id, err := b.rootID(ctx, nested[i])
		if err != nil {
			return err
		}
		if !slices.Contains(v.Nested, id) {
			v.Nested = append(v.Nested, id)
			if err := save(); err != nil {
				return err
			}
		}
		if _, err := b.run.run(ctx, "btrfs", "subvolume", "delete", "--commit-after", nested[i]); err != nil {
			return err
		}
	}
	_, err = b.run.run(ctx, "btrfs", "subvolume", "delete", "--commit-after", dir)
	return err
}

// nestedSubvolumes lists the subvolumes below dir, each before those
// inside it, without following symlinks or entering another mount.
func nestedSubvolumes(dir string) ([]string, error) {
	top, err := mountIDOf(dir)
	if err != nil {
		return nil, err
	}
	var found []string
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || path == dir {
			return err
		}
		id, err := mountIDOf(path)
		if err != nil {
			return err
		}
		if id != top {
			return filepath.SkipDir // a mount: not the volume's
		}
		if sub, err := isSubvolume(path); err != nil || sub {
			found = append(found, path)
			return err
		}
		return nil
	})
	return found, err
}

func mountIDOf(path string) (uint64, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &st); err != nil {
		return 0, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	return st.Mnt_id, nil
}

func (b *btrfsDriver) destroyQgroup(ctx context.Context, id uint64) error {
	ids := strconv.FormatUint(id, 10)
	// A commit wakes the cleaner, which drops deleted subvolumes.
	if _, err := b.run.run(ctx, "btrfs", "filesystem", "sync", b.root); err != nil {
		return err
	}
	wait := runner{timeout: min(b.run.timeout, dropTimeout)}
	if _, err := wait.run(ctx, "btrfs", "subvolume", "sync", b.root, ids); err != nil {
		return fmt.Errorf("subvolume %s: %w: %w", ids, errNotDropped, err)
	}
	out, err := b.run.run(ctx, "btrfs", "qgroup", "show", "--raw", b.root)
	if err != nil {
		return err
	}
	if _, err := referenced(out, id); err != nil {
		return nil //nolint:nilerr // not listed: the kernel destroyed it with the subvolume
	}
	_, err = b.run.run(ctx, "btrfs", "qgroup", "destroy", "0/"+ids, b.root)
	var te *toolError
	if errors.As(err, &te) && strings.Contains(te.stderr, "No such file or directory") {
		return nil // the kernel destroyed it since it was listed
	}
	return err
}

func (b *btrfsDriver) rootID(ctx context.Context, dir string) (uint64, error) {
	out, err := b.run.run(ctx, "btrfs", "inspect-internal", "rootid", dir)
	if err != nil {
		return 0, err
	}
	id, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("subvolume ID of %s: %w", dir, err)
	}
	return id, nil
}

// isSubvolume reports whether dir is a subvolume (not following a
// symlink); missing is false.
func isSubvolume(dir string) (bool, error) {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.IsDir() && st.Ino == subvolumeIno, nil
}

// lexists reports whether path exists, without following a symlink.
func lexists(path string) (bool, error) {
	_, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}
