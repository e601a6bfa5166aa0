package capacity

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/btrfs"
)

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
	tool btrfs.Tool
}

var _ driver = (*btrfsDriver)(nil)

// newBtrfs makes the driver of a btrfs root, turning quotas on when cfg
// allows it. Quotas off (or btrfs(8) missing) is no reason to refuse the
// root: the operator can fix either while the agent runs, so each
// creation and expansion looks again (quotasOn) and fails with what to do
// while they are off; a warning says so now.
func newBtrfs(ctx context.Context, cfg Config) (*btrfsDriver, error) {
	b := &btrfsDriver{root: cfg.Root, mode: cfg.VolumeMode, tool: btrfs.Tool{Timeout: cfg.Timeout, Hook: crashPoint}}
	on, err := b.tool.QuotasOn(ctx, b.root)
	switch {
	case err == nil && on:
		return b, nil
	case err != nil || !cfg.EnableBtrfsQuota:
		cfg.Logger.Warn("capacity not enforced on the local path root", zap.String("root", b.root), zap.Error(b.quotasErr(on, err)))
		return b, nil
	}
	if err := b.tool.EnableQuotas(ctx, b.root); err != nil {
		return nil, fmt.Errorf("turn on btrfs quotas on local path root %s: %w", b.root, err)
	}
	cfg.Logger.Info("turned on btrfs quotas on the local path root", zap.String("root", b.root))
	return b, nil
}

// quotasOn checks, as it is now, that quotas are on for the root: an
// operator who follows the error's advice is served at the next retry,
// with no restart.
func (b *btrfsDriver) quotasOn(ctx context.Context) error {
	return b.quotasErr(b.tool.QuotasOn(ctx, b.root))
}

// quotasErr is the error of btrfs.Tool.QuotasOn's answer: what to do when
// quotas are off, nil when they are on.
func (b *btrfsDriver) quotasErr(on bool, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("check btrfs quotas on local path root %s: %w", b.root, err)
	case !on:
		return b.quotasOff()
	}
	return nil
}

// quotasOff says what to do about quotas being off, cause first.
func (b *btrfsDriver) quotasOff() error {
	return fmt.Errorf("btrfs quotas are off on the local path root %s: turn them on (btrfs quota enable %s) to enforce volume sizes", b.root, b.root)
}

func (b *btrfsDriver) kind() string { return "btrfs" }

func (b *btrfsDriver) dir(v *record) string { return filepath.Join(b.root, v.Name) }

func (b *btrfsDriver) exists(v *record) (bool, error) { return lexists(b.dir(v)) }

// create checks quotas first: a subvolume made without them could not be
// limited and would only be taken down again.
func (b *btrfsDriver) create(ctx context.Context, v *record, save func() error) error {
	if err := b.quotasOn(ctx); err != nil {
		return err
	}
	dir := b.dir(v)
	sub, err := btrfs.IsSubvolume(dir)
	if err != nil {
		return err
	}
	if !sub {
		if err := b.tool.CreateSubvolume(ctx, dir); err != nil {
			return err
		}
	}
	id, err := b.tool.SubvolumeID(ctx, dir)
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
	id, err := b.tool.SubvolumeID(ctx, b.dir(v))
	if err != nil {
		return err
	}
	if id != v.ID {
		return fmt.Errorf("%s is subvolume %d, not %d as recorded", b.dir(v), id, v.ID)
	}
	return b.limit(ctx, v)
}

// recover is attach: a subvolume's limit is its size.
func (b *btrfsDriver) recover(ctx context.Context, v *record) error { return b.attach(ctx, v) }

// limit puts the volume's limit on its qgroup, and limits every
// subvolume a pod made inside it to the room left (btrfs.Tool.Enforce).
// Quotas off is reported with what to do.
func (b *btrfsDriver) limit(ctx context.Context, v *record) error {
	_, err := b.tool.Enforce(ctx, b.dir(v), v.Size)
	if errors.Is(err, btrfs.ErrQuotasOff) {
		return b.quotasOff()
	}
	return err
}

// usage sums the qgroups of the volume and of the subvolumes inside it,
// which may lag the writes by up to a transaction commit, after making
// their limits again (btrfs.Tool.Enforce): a subvolume made inside the
// volume since is counted from now on.
func (b *btrfsDriver) usage(ctx context.Context, v *record) (Usage, error) {
	l, err := b.tool.Enforce(ctx, b.dir(v), v.Size)
	if err != nil {
		return Usage{}, err
	}
	used := int64(min(l.Qgroup.Referenced, math.MaxInt64)) //nolint:gosec // G115: bounded just before
	return Usage{CapacityBytes: v.Size, UsedBytes: used, AvailableBytes: max(0, v.Size-used)}, nil
}

// taken is the subvolume's referenced bytes, as its qgroup counts them,
// less those a volume made from a snapshot or another volume shares with
// it (shared).
func (b *btrfsDriver) taken(ctx context.Context, v *record) (int64, error) {
	u, err := b.usage(ctx, v)
	if err != nil {
		return 0, err
	}
	shared, err := b.shared(ctx, v)
	return max(0, u.UsedBytes-shared), err
}

// footprint is the volume's size: its qgroup limit.
func (b *btrfsDriver) footprint(v *record) (int64, error) { return v.Size, nil }

// remove deletes the subvolume, waits for the kernel to drop it, then
// destroys its qgroup unless the kernel did (Linux 6.7 and later do).
func (b *btrfsDriver) remove(ctx context.Context, v *record, save func() error) error {
	dir := b.dir(v)
	id, err := b.recorded(ctx, v, dir)
	if err != nil {
		return err
	}
	if id != 0 {
		v.ID = id
		if err := save(); err != nil { // the qgroup's name, for after a crash
			return err
		}
		if err := b.deleteTree(ctx, v, dir, save); err != nil {
			return err
		}
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

// archive renames the subvolume of v to a's, after checking it is the
// one recorded. Its qgroup and limit go with it: the archive keeps its
// size.
func (b *btrfsDriver) archive(ctx context.Context, v, a *record) error {
	dir := b.dir(v)
	if _, err := b.recorded(ctx, v, dir); err != nil {
		return err
	}
	return move(dir, b.dir(a))
}

// recorded checks that dir is the subvolume v records (any subvolume when
// v records none yet: a creation cut short before its ID was saved) and
// returns its ID, or 0 when nothing is at dir. Anything else there is
// left alone, with an error.
func (b *btrfsDriver) recorded(ctx context.Context, v *record, dir string) (uint64, error) {
	sub, err := btrfs.IsSubvolume(dir)
	if err != nil {
		return 0, err
	}
	if !sub {
		if ok, err := lexists(dir); err != nil || ok {
			return 0, errors.Join(err, fmt.Errorf("%s is not a subvolume; leaving it", dir))
		}
		return 0, nil
	}
	id, err := b.tool.SubvolumeID(ctx, dir)
	if err != nil {
		return 0, err
	}
	if v.ID != 0 && id != v.ID {
		return 0, fmt.Errorf("%s is subvolume %d, not %d as recorded; leaving it", dir, id, v.ID)
	}
	return id, nil
}

// deleteTree deletes the subvolume dir and every subvolume a pod made
// inside it (any user may make one), each by its ID, their IDs written
// down first for their qgroups (btrfs.Tool.DeleteTree).
func (b *btrfsDriver) deleteTree(ctx context.Context, v *record, dir string, save func() error) error {
	return b.tool.DeleteTree(ctx, dir, func(ids []uint64) error {
		n := len(v.Nested)
		for _, id := range ids {
			if !slices.Contains(v.Nested, id) {
				v.Nested = append(v.Nested, id)
			}
		}
		if len(v.Nested) == n {
			return nil
		}
		return save()
	})
}

func (b *btrfsDriver) destroyQgroup(ctx context.Context, id uint64) error {
	// A commit wakes the cleaner, which drops deleted subvolumes.
	if err := b.tool.Sync(ctx, b.root); err != nil {
		return err
	}
	wait := b.tool
	wait.Timeout = min(b.tool.Timeout, dropTimeout)
	if err := wait.WaitDropped(ctx, b.root, id); err != nil {
		return fmt.Errorf("subvolume %d: %w: %w", id, errNotDropped, err)
	}
	listed, err := b.tool.HasQgroup(ctx, b.root, id)
	if errors.Is(err, btrfs.ErrQuotasOff) {
		return nil // turning quotas off dropped every qgroup; turning them on makes none for a deleted subvolume
	}
	if err != nil || !listed {
		return err // not listed: the kernel destroyed it with the subvolume
	}
	return b.tool.DestroyQgroup(ctx, b.root, id)
}

// lexists reports whether path exists, without following a symlink.
func lexists(path string) (bool, error) {
	_, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// move renames from to to, never over anything: from gone and to there
// is a move done already.
func move(from, to string) error {
	crashPoint()
	defer crashPoint()
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.ENOENT) {
		if ok, lerr := lexists(to); lerr == nil && ok {
			return nil
		}
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}
