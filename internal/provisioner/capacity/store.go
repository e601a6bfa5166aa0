package capacity

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/keylock"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner/storagedir"
)

// driver is one way of enforcing a size: the steps a Backend takes, each
// idempotent (a step repeated after a crash, or after it half ran, ends
// in the same place). v.Name is valid; dir is <root>/<v.Name>.
type driver interface {
	kind() string
	// exists reports whether anything of v is on disk: a volume without a
	// record that does is not this agent's, and is left alone.
	exists(v *record) (bool, error)
	// create makes v, or finishes making it; save writes v down (after
	// the driver learnt v.ID).
	create(ctx context.Context, v *record, save func() error) error
	// expand grows v to v.Size.
	expand(ctx context.Context, v *record) error
	// attach makes a made volume usable again after a restart.
	attach(ctx context.Context, v *record) error
	// recover attaches a ready volume at start, and makes it whole where
	// it can (an image made smaller by an older version is grown to hold
	// its size when it is found unmounted).
	recover(ctx context.Context, v *record) error
	usage(ctx context.Context, v *record) (Usage, error)
	// taken is how many bytes of the root's file system v takes now.
	taken(ctx context.Context, v *record) (int64, error)
	// footprint is how many bytes of the root's file system v may take
	// in all: its size, or its image, larger than its size by what ext4
	// keeps for itself.
	footprint(v *record) (int64, error)
	// remove removes what v uses, whatever part of it exists.
	remove(ctx context.Context, v *record, save func() error) error
	// archive takes v out of use and moves what it uses to the names of
	// a, whatever part of that is done already.
	archive(ctx context.Context, v, a *record) error

	// snapshotExists reports whether anything of the snapshot s is on
	// disk.
	snapshotExists(s *record) (bool, error)
	// snapshot takes the snapshot s of the volume v: a copy of one
	// moment, setting s.ID, s.Bytes (and s.Reflinked) and saving them.
	snapshot(ctx context.Context, v, s *record, save func() error) error
	// removeSnapshot removes what the snapshot s uses, whatever part of
	// it exists.
	removeSnapshot(ctx context.Context, s *record, save func() error) error
	// createFrom makes v with the content of from: a snapshot's record
	// (Kind snapshotKind) or a made volume's.
	createFrom(ctx context.Context, v, from *record, save func() error) error
	// snapshotPromised is what the snapshot s may still take of the
	// root's file system.
	snapshotPromised(ctx context.Context, s *record) (int64, error)
}

// sizeUnit: sizes are rounded up to whole 4 KiB blocks.
const sizeUnit = 4096

// store is the Backend over a driver: it checks names, serialises work
// per volume and writes each step down before the driver takes it.
type store struct {
	cfg   Config
	d     driver
	log   *zap.Logger
	locks keylock.Locks
}

var _ Backend = (*store)(nil)

// Kind: see Backend.
func (s *store) Kind() string { return s.d.kind() }

func (s *store) journal() journal { return journal{dir: s.cfg.StateDir} }

func (s *store) dir(name string) string { return filepath.Join(s.cfg.Root, name) }

var _ BlockCreator = (*store)(nil)

// Create: see Backend.
func (s *store) Create(ctx context.Context, name string, size int64) (string, error) {
	return s.createVolume(ctx, name, size, false)
}

// CreateBlock: see BlockCreator. Only the image backend makes them.
func (s *store) CreateBlock(ctx context.Context, name string, size int64) (string, error) {
	if s.d.kind() != imageKind {
		return "", fmt.Errorf("create volume %s: the %s backend makes no raw block volumes (volumeMode Block needs a local path root on another file system than btrfs)", name, s.d.kind())
	}
	return s.createVolume(ctx, name, size, true)
}

// path is where the volume of r is: its directory, or its image for a
// raw block volume.
func (s *store) path(r *record) string {
	if r.Block {
		return s.dir(r.Name) + ImageSuffix
	}
	return s.dir(r.Name)
}

// createVolume makes the volume name, a raw block volume when block.
func (s *store) createVolume(ctx context.Context, name string, size int64, block bool) (string, error) {
	size, err := checkArgs(name, size)
	if err != nil {
		return "", err
	}
	defer s.locks.Lock(name)()
	r, err := s.load(name)
	switch {
	case errors.Is(err, ErrNotFound):
		r = &record{Name: name, Backend: s.d.kind(), State: creating, Size: size, Block: block}
		found, err := s.d.exists(r)
		if err != nil {
			return "", fmt.Errorf("create volume %s: %w", name, err)
		}
		if found {
			return "", fmt.Errorf("create volume %s: its files exist under the local path root but were not made by volume-agent; leaving them", name)
		}
	case err != nil:
		return "", err
	case r.State == deleting:
		return "", fmt.Errorf("create volume %s: it is being deleted; retry once it is gone", name)
	case r.State == archiving || r.State == archived:
		return "", fmt.Errorf("create volume %s: it is %s; retry once it is archived under another name", name, r.State)
	case r.State == creating:
		// A creation that failed and could not be rolled back: start
		// again from nothing rather than trust what it left.
		if err := s.rollBack(ctx, r); err != nil {
			return "", err
		}
		r = &record{Name: name, Backend: s.d.kind(), State: creating, Size: size, Block: block}
	case r.Block != block:
		return "", fmt.Errorf("create volume %s: %w (a raw block volume: %t)", name, ErrExists, r.Block)
	case r.Size != size:
		return "", fmt.Errorf("create volume %s of %d bytes: %w (%d bytes)", name, size, ErrExists, r.Size)
	case r.State == expanding:
		if err := s.finishExpand(ctx, r); err != nil {
			return "", err
		}
		return s.path(r), nil
	case r.State == ready:
		if err := s.d.attach(ctx, r); err != nil {
			return "", fmt.Errorf("attach volume %s: %w", name, err)
		}
		return s.path(r), nil
	}
	r.UID = newUID()
	if err := s.create(ctx, r, s.d.create); err != nil {
		return "", err
	}
	return s.path(r), nil
}

// create writes r down as creating, lets maker (the driver's create, or
// createFrom) make it, and rolls it back when that fails.
func (s *store) create(ctx context.Context, r *record, maker func(context.Context, *record, func() error) error) error {
	save := func() error { return s.journal().save(r) }
	if err := save(); err != nil {
		return err
	}
	return s.build(ctx, r, save, maker)
}

// build lets maker make r, written down as creating already, writes it
// down as ready, and rolls it back when that fails.
func (s *store) build(ctx context.Context, r *record, save func() error, maker func(context.Context, *record, func() error) error) (retErr error) {
	defer func() {
		if retErr != nil {
			rctx, cancel := mount.RollbackContext(ctx)
			defer cancel()
			if err := s.rollBack(rctx, r); err != nil {
				s.log.Warn("could not roll back a failed volume creation", zap.String("volume", r.Name), zap.Error(err))
			}
		}
	}()
	if err := maker(ctx, r, save); err != nil {
		return fmt.Errorf("create volume %s: %w", r.Name, err)
	}
	r.State = ready
	if err := save(); err != nil {
		return err
	}
	s.log.Info("volume created", zap.String("volume", r.Name), zap.Int64("size", r.Size))
	return nil
}

// unused refuses, before an unfinished volume is removed at start, a
// volume that a mount other than its own shows (a pod's bind mount): its
// creation was never handed to a caller and its deletion was decided on
// earlier facts, but data in use is never removed on a record alone. Its
// record stays, so the next start looks again.
func (s *store) unused(ctx context.Context, r *record) error {
	dir := s.dir(r.Name)
	if r.Block {
		return nil // a published device is refused by the driver's remove (published)
	}
	users, err := mount.MountsOf(ctx, dir)
	if err != nil {
		return fmt.Errorf("find the mounts of %s: %w", dir, err)
	}
	if len(users) > 0 {
		return fmt.Errorf("%s is mounted at %s: leaving it and its record: %w", dir, strings.Join(users, ", "), storagedir.ErrInUse)
	}
	return nil
}

// rollBack removes all of r and its record.
func (s *store) rollBack(ctx context.Context, r *record) error {
	r.State = deleting
	return s.delete(ctx, r)
}

// delete removes what r uses, then its record; r is written down as
// deleting first.
func (s *store) delete(ctx context.Context, r *record) error {
	save := func() error { return s.journal().save(r) }
	if err := save(); err != nil {
		return err
	}
	if err := s.d.remove(ctx, r, save); err != nil {
		return fmt.Errorf("delete volume %s: %w", r.Name, err)
	}
	return s.journal().remove(r.Name)
}

// Expand: see Backend.
func (s *store) Expand(ctx context.Context, name string, size int64) error {
	size, err := checkArgs(name, size)
	if err != nil {
		return err
	}
	defer s.locks.Lock(name)()
	r, err := s.loadMade(name)
	if err != nil {
		return err
	}
	switch {
	case size < r.Size:
		return fmt.Errorf("expand volume %s to %d bytes: %w (it has %d)", name, size, ErrShrink, r.Size)
	case size == r.Size && r.State == ready:
		return nil
	}
	r.State, r.Size = expanding, size
	if err := s.journal().save(r); err != nil {
		return err
	}
	return s.finishExpand(ctx, r)
}

func (s *store) finishExpand(ctx context.Context, r *record) error {
	if err := s.d.expand(ctx, r); err != nil {
		return fmt.Errorf("expand volume %s to %d bytes: %w", r.Name, r.Size, err)
	}
	r.State = ready
	if err := s.journal().save(r); err != nil {
		return err
	}
	s.log.Info("volume expanded", zap.String("volume", r.Name), zap.Int64("size", r.Size))
	return nil
}

// Usage: see Backend.
func (s *store) Usage(ctx context.Context, name string) (Usage, error) {
	if err := validName(name); err != nil {
		return Usage{}, err
	}
	defer s.locks.Lock(name)()
	r, err := s.loadMade(name)
	if err != nil {
		return Usage{}, err
	}
	u, err := s.d.usage(ctx, r)
	if err != nil {
		return Usage{}, fmt.Errorf("measure volume %s: %w", name, err)
	}
	return u, nil
}

// Promised: see Backend.
func (s *store) Promised(ctx context.Context) (map[string]int64, error) {
	names, err := s.journal().names()
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(names))
	for _, name := range names {
		if n := s.promised(ctx, name); n > 0 {
			out[name] = n
		}
	}
	if err := s.promisedSnapshots(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// promised is what the volume name may still take of the root's file
// system.
func (s *store) promised(ctx context.Context, name string) int64 {
	defer s.locks.Lock(name)()
	r, err := s.load(name)
	switch {
	case errors.Is(err, ErrNotFound):
		return 0 // deleted meanwhile
	case err != nil:
		s.log.Warn("volume left out of what volumes may still take: its record cannot be read", zap.String("volume", name), zap.Error(err))
		return 0
	case r.State == deleting:
		return 0
	case r.State == archived:
		if found, err := s.recoverArchive(r); err != nil || !found {
			if err != nil {
				s.log.Warn("volume counted with all it may hold: what it takes cannot be measured", zap.String("volume", name), zap.Error(err))
				return r.Size
			}
			return 0
		}
	}
	all, err := s.d.footprint(r)
	if err != nil {
		s.log.Warn("volume counted with all it may hold: what it takes cannot be measured", zap.String("volume", name), zap.Error(err))
		return r.Size
	}
	if r.State == creating {
		return all
	}
	used, err := s.d.taken(ctx, r)
	if err != nil {
		s.log.Warn("volume counted with all it may hold: what it takes cannot be measured", zap.String("volume", name), zap.Error(err))
		return all
	}
	return max(0, all-used)
}

// Footprinter is implemented by a Backend whose volumes take more of the
// root's file system than their size: the image backend, whose images
// hold ext4's own metadata besides.
type Footprinter interface {
	// Footprint is how many bytes of the root's file system a volume of
	// size bytes may take once made (an estimate a few per mille high).
	Footprint(size int64, block bool) int64
}

var _ Footprinter = (*store)(nil)

// Footprint: see Footprinter.
func (s *store) Footprint(size int64, block bool) int64 {
	size = (size + sizeUnit - 1) / sizeUnit * sizeUnit
	n, err := s.d.footprint(&record{Size: size, Block: block})
	if err != nil {
		return size
	}
	return n
}

// Delete: see Backend.
func (s *store) Delete(ctx context.Context, name string) error {
	if err := validName(name); err != nil {
		return err
	}
	defer s.locks.Lock(name)()
	r, err := s.load(name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if r.State == archiving {
		return fmt.Errorf("delete volume %s: it is being archived as %s; it is kept", name, r.Archive)
	}
	r.State = deleting
	if err := s.delete(ctx, r); err != nil {
		return err
	}
	s.log.Info("volume deleted", zap.String("volume", name))
	return nil
}

// Recover: see Backend. A volume that cannot be recovered is left out of
// the result and its error joined to the one returned; the others are
// recovered all the same.
func (s *store) Recover(ctx context.Context) ([]Volume, error) {
	names, err := s.journal().names()
	if err != nil {
		return nil, err
	}
	var vols []Volume
	var errs []error
	for _, name := range names {
		v, ok, err := s.recoverOne(ctx, name)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			vols = append(vols, v)
		}
	}
	// After the volumes: a restore rolled back frees its snapshot.
	if err := s.recoverSnapshots(ctx); err != nil {
		errs = append(errs, err)
	}
	return vols, errors.Join(errs...)
}

// recoverOne finishes or rolls back the step the record of name names.
func (s *store) recoverOne(ctx context.Context, name string) (Volume, bool, error) {
	defer s.locks.Lock(name)()
	r, err := s.load(name)
	if err != nil {
		return Volume{}, false, err
	}
	log := s.log.With(zap.String("volume", name), zap.String("state", string(r.State)))
	switch r.State {
	case creating, deleting:
		if err := s.unused(ctx, r); err != nil {
			return Volume{}, false, fmt.Errorf("recover volume %s (%s): %w", name, r.State, err)
		}
		r.State = deleting
		if err := s.delete(ctx, r); err != nil {
			return Volume{}, false, err
		}
		log.Info("unfinished volume removed")
		return Volume{}, false, nil
	case archiving:
		_, err = s.finishArchive(ctx, r)
		return Volume{}, false, err
	case archived:
		_, err = s.recoverArchive(r)
		return Volume{}, false, err
	case expanding:
		err = s.finishExpand(ctx, r)
	case ready:
		err = s.d.recover(ctx, r)
	default:
		err = fmt.Errorf("record of volume %s has unknown state %q", name, r.State)
	}
	if err != nil {
		return Volume{}, false, fmt.Errorf("recover volume %s: %w", name, err)
	}
	log.Debug("volume recovered")
	return Volume{Name: name, Path: s.path(r), Size: r.Size, Block: r.Block}, true, nil
}

// load reads the record of name and checks it is this backend's.
func (s *store) load(name string) (*record, error) {
	r, err := s.journal().load(name)
	if err != nil {
		return nil, err
	}
	if r.Backend != s.d.kind() {
		return nil, fmt.Errorf("volume %s was made by the %s backend, not %s: was the local path root moved to another file system?", name, r.Backend, s.d.kind())
	}
	return r, nil
}

// loadMade loads a volume that has been made (ready or being expanded).
func (s *store) loadMade(name string) (*record, error) {
	r, err := s.load(name)
	if err != nil {
		return nil, err
	}
	if r.State != ready && r.State != expanding {
		return nil, fmt.Errorf("volume %s is %s: %w", name, r.State, ErrNotFound)
	}
	return r, nil
}

// checkArgs validates name and returns size rounded up to sizeUnit.
func checkArgs(name string, size int64) (int64, error) {
	if err := validName(name); err != nil {
		return 0, err
	}
	if size <= 0 || size > 1<<62 {
		return 0, fmt.Errorf("volume %s: size %d bytes is out of range", name, size)
	}
	return (size + sizeUnit - 1) / sizeUnit * sizeUnit, nil
}
