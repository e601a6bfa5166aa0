package capacity

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/mount"
)

// Snapshotter is implemented by both backends: point-in-time copies of a
// volume (snapshots), and volumes made with the content of a snapshot
// (restore) or of another volume (clone).
type Snapshotter interface {
	// Snapshot takes the snapshot snap of the volume source and returns
	// it. Taking it again returns it again; snap taken of another volume
	// (or of an earlier volume of the same name, deleted since) is
	// ErrExists. A raw block volume is refused (ErrBlockSnapshot).
	Snapshot(ctx context.Context, source, snap string) (Snapshot, error)
	// DeleteSnapshot removes the snapshot snap; gone already is not an
	// error. It is refused (ErrSnapshotBusy) while a volume is being made
	// from it, and that holds across a crash until Recover has rolled the
	// unfinished volume back.
	DeleteSnapshot(ctx context.Context, snap string) error
	// Snapshots lists the snapshots that are ready, by name.
	Snapshots(ctx context.Context) ([]Snapshot, error)
	// SnapshotInfo returns the snapshot snap, or ErrNotFound.
	SnapshotInfo(ctx context.Context, snap string) (Snapshot, error)
	// CreateFrom makes the volume name of size bytes, as Create does, with
	// the content of src, and returns its directory. size may not be
	// smaller than the source volume's size (ErrShrink). Making it again
	// from the same source returns it again; a volume name that exists
	// made from something else (or from nothing) is ErrExists.
	CreateFrom(ctx context.Context, name string, size int64, src Source) (string, error)
}

// Source is what CreateFrom copies: exactly one is set.
type Source struct {
	Snapshot string // restore: a snapshot's name
	Volume   string // clone: a volume's name
}

// Snapshot is one snapshot.
type Snapshot struct {
	Name string
	// Source is the name of the volume it is of (which may have been
	// deleted since).
	Source string
	// Size is the source volume's size when it was taken: the least a
	// volume made from it may have.
	Size    int64
	Created time.Time
	// Bytes is what it may take of the root's file system, counted in
	// Promised: on btrfs the bytes its source referenced when it was
	// taken (it shares them with the source until the source overwrites
	// them), for an image the bytes its copy has allocated.
	Bytes int64
}

var (
	// ErrSnapshotBusy: a volume is being made from the snapshot.
	ErrSnapshotBusy = errors.New("a volume is being made from the snapshot")
	// ErrBlockSnapshot: a raw block volume has no point-in-time copy.
	ErrBlockSnapshot = errors.New("raw block volumes have no snapshots or clones: the agent cannot freeze a device a pod may be writing, so a copy would not be of one moment; use volumeMode Filesystem")
	// ErrNestedSubvolumes: a btrfs volume holds subvolumes a pod made
	// inside it, which a btrfs snapshot does not include.
	ErrNestedSubvolumes = errors.New("it holds btrfs subvolumes a pod made inside it, which a btrfs snapshot does not include (they would be empty directories in the copy), so the copy is refused rather than incomplete")
)

// snapshotKind is the Kind of a snapshot's record.
const snapshotKind = "snapshot"

// SnapshotDir holds the snapshots under the root (<root>/.snapshots/), and
// their records under the state directory: a hidden name, so never a
// volume's or an archive's.
const SnapshotDir = ".snapshots"

// snapshotRecords is the directory of the snapshots' records under the
// state directory.
const snapshotRecords = "snapshots"

// SnapshotKey is the key of the snapshot name in Promised's map: hidden and
// holding a slash, so never a volume's name.
func SnapshotKey(name string) string { return SnapshotDir + "/" + name }

// snapLock is the key of a snapshot in the store's locks. Volumes are
// locked before snapshots, and two volumes in the order of their names,
// so that no two calls wait for each other.
func snapLock(name string) string { return "snapshot/" + name }

var _ Snapshotter = (*store)(nil)

func (s *store) snapshots() journal {
	return journal{dir: filepath.Join(s.cfg.StateDir, snapshotRecords)}
}

// newUID is a random identity for a record.
func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// loadSnapshot reads the record of the snapshot name and checks it is
// this backend's.
func (s *store) loadSnapshot(name string) (*record, error) {
	r, err := s.snapshots().load(name)
	if err != nil {
		return nil, err
	}
	if r.Kind != snapshotKind || r.Backend != s.d.kind() {
		return nil, fmt.Errorf("record of snapshot %s is of a %s %s, not a %s snapshot: was the local path root moved to another file system?", name, r.Backend, r.Kind, s.d.kind())
	}
	return r, nil
}

func snapshotOf(r *record) Snapshot {
	return Snapshot{Name: r.Name, Source: r.Source, Size: r.Size, Created: r.Created, Bytes: r.Bytes}
}

// Snapshot: see Snapshotter. The snapshot's record (creating, naming its
// source and the source's UID) is written before the driver acts, so that
// Recover rolls back a snapshot cut short.
func (s *store) Snapshot(ctx context.Context, source, snap string) (Snapshot, error) {
	if err := validName(source); err != nil {
		return Snapshot{}, err
	}
	if err := validName(snap); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	defer s.locks.Lock(source)()
	defer s.locks.Lock(snapLock(snap))()
	v, err := s.source(ctx, source)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s of volume %s: %w", snap, source, err)
	}
	r, err := s.loadSnapshot(snap)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return Snapshot{}, err
	case r.State == deleting:
		return Snapshot{}, fmt.Errorf("snapshot %s: it is being deleted; retry once it is gone", snap)
	case r.State == creating:
		// Cut short and not rolled back: start again from nothing.
		if err := s.removeSnapshot(ctx, r); err != nil {
			return Snapshot{}, err
		}
	case r.Source != source || r.SourceUID != v.UID:
		return Snapshot{}, exists("snapshot %s of volume %s: snapshot %s exists, taken of volume %s at %s (a volume of that name made since is another volume); take it under another name",
			snap, source, snap, r.Source, r.Created.Format(time.RFC3339))
	default:
		return snapshotOf(r), nil
	}
	r = &record{Kind: snapshotKind, Name: snap, Backend: s.d.kind(), State: creating, Size: v.Size,
		UID: newUID(), Source: source, SourceUID: v.UID, Created: time.Now().UTC().Truncate(time.Second)}
	found, err := s.d.snapshotExists(r)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", snap, err)
	}
	if found {
		return Snapshot{}, fmt.Errorf("snapshot %s: its files exist under %s but were not made by volume-agent; leaving them", snap, filepath.Join(s.cfg.Root, SnapshotDir))
	}
	if err := s.takeSnapshot(ctx, v, r); err != nil {
		return Snapshot{}, err
	}
	return snapshotOf(r), nil
}

// source loads the made volume name, as the source of a snapshot or a
// clone: not a raw block volume, an expansion under way finished, and
// given a UID when its record has none yet. The caller holds its lock.
func (s *store) source(ctx context.Context, name string) (*record, error) {
	v, err := s.loadMade(name)
	if err != nil {
		return nil, err
	}
	if v.Block {
		return nil, ErrBlockSnapshot
	}
	if v.State == expanding {
		if err := s.finishExpand(ctx, v); err != nil {
			return nil, err
		}
	}
	if v.UID == "" {
		v.UID = newUID()
		if err := s.journal().save(v); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// takeSnapshot writes r down as creating, lets the driver take it of v,
// and writes it down as ready; a failure is rolled back.
func (s *store) takeSnapshot(ctx context.Context, v, r *record) (retErr error) {
	save := func() error { return s.snapshots().save(r) }
	if err := save(); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			rctx, cancel := mount.RollbackContext(ctx)
			defer cancel()
			if err := s.removeSnapshot(rctx, r); err != nil {
				s.log.Warn("could not roll back a failed snapshot", zap.String("snapshot", r.Name), zap.Error(err))
			}
		}
	}()
	if err := s.d.snapshot(ctx, v, r, save); err != nil {
		return fmt.Errorf("snapshot %s of volume %s: %w", r.Name, v.Name, err)
	}
	r.State = ready
	if err := save(); err != nil {
		return err
	}
	s.log.Info("snapshot taken", zap.String("snapshot", r.Name), zap.String("volume", v.Name), zap.Int64("bytes", r.Bytes))
	return nil
}

// removeSnapshot writes r down as deleting, removes what it uses, then
// its record.
func (s *store) removeSnapshot(ctx context.Context, r *record) error {
	r.State = deleting
	save := func() error { return s.snapshots().save(r) }
	if err := save(); err != nil {
		return err
	}
	if err := s.d.removeSnapshot(ctx, r, save); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", r.Name, err)
	}
	return s.snapshots().remove(r.Name)
}

// DeleteSnapshot: see Snapshotter.
func (s *store) DeleteSnapshot(ctx context.Context, snap string) error {
	if err := validName(snap); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer s.locks.Lock(snapLock(snap))()
	r, err := s.loadSnapshot(snap)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if r.State != deleting {
		users, err := s.restoring(snap)
		if err != nil {
			return err
		}
		if len(users) > 0 {
			return fmt.Errorf("delete snapshot %s: %w (volume %s); retry once it is made", snap, ErrSnapshotBusy, users[0])
		}
	}
	if err := s.removeSnapshot(ctx, r); err != nil {
		return err
	}
	s.log.Info("snapshot deleted", zap.String("snapshot", snap))
	return nil
}

// restoring lists the volumes whose records say they are being made from
// the snapshot snap. CreateFrom writes such a record while it holds the
// snapshot's lock, which the caller holds.
func (s *store) restoring(snap string) ([]string, error) {
	names, err := s.journal().names()
	if err != nil {
		return nil, err
	}
	var users []string
	for _, name := range names {
		r, err := s.journal().load(name)
		if errors.Is(err, ErrNotFound) {
			continue // gone meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("delete snapshot %s: a volume's record cannot be read, so a restore from the snapshot cannot be ruled out: %w", snap, err)
		}
		if r.State == creating && r.Origin != nil && r.Origin.Snapshot == snap {
			users = append(users, name)
		}
	}
	return users, nil
}

// Snapshots: see Snapshotter.
func (s *store) Snapshots(_ context.Context) ([]Snapshot, error) {
	names, err := s.snapshots().names()
	if err != nil {
		return nil, err
	}
	out := make([]Snapshot, 0, len(names))
	for _, name := range names {
		r, err := s.loadSnapshot(name)
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		if r.State == ready {
			out = append(out, snapshotOf(r))
		}
	}
	slices.SortFunc(out, func(a, b Snapshot) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// SnapshotInfo: see Snapshotter.
func (s *store) SnapshotInfo(_ context.Context, snap string) (Snapshot, error) {
	if err := validName(snap); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	r, err := s.loadSnapshot(snap)
	if errors.Is(err, ErrNotFound) {
		return Snapshot{}, noSnapshot("no snapshot %s", snap)
	}
	if err != nil {
		return Snapshot{}, err
	}
	if r.State != ready {
		return Snapshot{}, noSnapshot("snapshot %s is %s, not ready", snap, r.State)
	}
	return snapshotOf(r), nil
}

// CreateFrom: see Snapshotter. The volume's record (creating, naming its
// origin) is written before the driver acts: Recover rolls back a volume
// cut short (its caller never got a path), and DeleteSnapshot refuses the
// snapshot it names meanwhile.
func (s *store) CreateFrom(ctx context.Context, name string, size int64, src Source) (string, error) {
	size, err := checkArgs(name, size)
	if err != nil {
		return "", err
	}
	switch {
	case (src.Snapshot == "") == (src.Volume == ""):
		return "", fmt.Errorf("create volume %s: name either a snapshot or a volume to copy, not %q and %q", name, src.Snapshot, src.Volume)
	case src.Volume == name:
		return "", fmt.Errorf("create volume %s: a volume cannot be a clone of itself", name)
	case src.Volume != "":
		if err := validName(src.Volume); err != nil {
			return "", fmt.Errorf("create volume %s: source: %w", name, err)
		}
		first, second := min(name, src.Volume), max(name, src.Volume)
		defer s.locks.Lock(first)()
		defer s.locks.Lock(second)()
	default:
		if err := validName(src.Snapshot); err != nil {
			return "", fmt.Errorf("create volume %s: snapshot: %w", name, err)
		}
		defer s.locks.Lock(name)()
	}
	r, err := s.load(name)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return "", err
	case r.State == deleting:
		return "", fmt.Errorf("create volume %s: it is being deleted; retry once it is gone", name)
	case r.State == archiving || r.State == archived:
		return "", fmt.Errorf("create volume %s: it is %s; retry once it is archived under another name", name, r.State)
	case r.State == creating:
		if err := s.rollBack(ctx, r); err != nil {
			return "", err
		}
	default:
		return s.madeFrom(ctx, r, size, src)
	}
	r = &record{Name: name, Backend: s.d.kind(), State: creating, Size: size, UID: newUID()}
	found, err := s.d.exists(r)
	if err != nil {
		return "", fmt.Errorf("create volume %s: %w", name, err)
	}
	if found {
		return "", fmt.Errorf("create volume %s: its files exist under the local path root but were not made by volume-agent; leaving them", name)
	}
	from, save, err := s.origin(ctx, r, src)
	if err != nil {
		return "", fmt.Errorf("create volume %s: %w", name, err)
	}
	if err := s.build(ctx, r, save, func(ctx context.Context, r *record, save func() error) error {
		return s.d.createFrom(ctx, r, from, save)
	}); err != nil {
		return "", err
	}
	return s.path(r), nil
}

// origin loads what src names for the new volume r, checks r is not
// smaller, and writes r down as creating from it, with its origin. A
// snapshot is locked only while r is written down: from then on, r's
// record keeps DeleteSnapshot from it.
func (s *store) origin(ctx context.Context, r *record, src Source) (*record, func() error, error) {
	var from *record
	if src.Snapshot != "" {
		defer s.locks.Lock(snapLock(src.Snapshot))()
		sr, err := s.loadSnapshot(src.Snapshot)
		if errors.Is(err, ErrNotFound) {
			return nil, nil, noSnapshot("no snapshot %s", src.Snapshot)
		}
		if err != nil {
			return nil, nil, err
		}
		if sr.State != ready {
			return nil, nil, noSnapshot("snapshot %s is %s, not ready", src.Snapshot, sr.State)
		}
		from, r.Origin = sr, &origin{Snapshot: sr.Name, SnapshotUID: sr.UID}
	} else {
		v, err := s.source(ctx, src.Volume)
		if err != nil {
			return nil, nil, fmt.Errorf("volume %s: %w", src.Volume, err)
		}
		from, r.Origin = v, &origin{Volume: v.Name, VolumeUID: v.UID}
	}
	if r.Size < from.Size {
		return nil, nil, fmt.Errorf("%d bytes is smaller than its source (%d bytes): %w", r.Size, from.Size, ErrShrink)
	}
	save := func() error { return s.journal().save(r) }
	return from, save, save()
}

// madeFrom answers a CreateFrom of a volume r that is made already: the
// same size and origin is the volume again; anything else is ErrExists.
// A snapshot of the name it was made from, taken since, is another one.
func (s *store) madeFrom(ctx context.Context, r *record, size int64, src Source) (string, error) {
	o := r.Origin
	same := o != nil && o.Snapshot == src.Snapshot && o.Volume == src.Volume
	if same && src.Snapshot != "" {
		if sr, err := s.snapshots().load(src.Snapshot); err == nil && sr.UID != o.SnapshotUID {
			same = false
		}
	}
	switch {
	case !same:
		return "", exists("create volume %s from %s: volume %s exists, made from something else", r.Name, src.String(), r.Name)
	case r.Size != size:
		return "", fmt.Errorf("create volume %s of %d bytes: %w (%d bytes)", r.Name, size, ErrExists, r.Size)
	case r.State == expanding:
		if err := s.finishExpand(ctx, r); err != nil {
			return "", err
		}
	default:
		if err := s.d.attach(ctx, r); err != nil {
			return "", fmt.Errorf("attach volume %s: %w", r.Name, err)
		}
	}
	return s.path(r), nil
}

// kindError is one of the package's errors (ErrExists, ErrNotFound) with
// a message of its own: theirs speak of volumes ("with another size", "no
// such volume"), which a snapshot, or a name taken by something else, is
// not.
type kindError struct {
	msg  string
	kind error
}

func (e kindError) Error() string { return e.msg }

func (e kindError) Unwrap() error { return e.kind }

func exists(format string, args ...any) error {
	return kindError{msg: fmt.Sprintf(format, args...), kind: ErrExists}
}

func noSnapshot(format string, args ...any) error {
	return kindError{msg: fmt.Sprintf(format, args...), kind: ErrNotFound}
}

func (src Source) String() string {
	if src.Snapshot != "" {
		return "snapshot " + src.Snapshot
	}
	return "volume " + src.Volume
}

// promisedSnapshots adds to out what each snapshot may still take of the
// root: being taken, its source's whole footprint; taken, what the driver
// says (snapshotPromised); being deleted, nothing.
func (s *store) promisedSnapshots(ctx context.Context, out map[string]int64) error {
	names, err := s.snapshots().names()
	if err != nil {
		return err
	}
	for _, name := range names {
		if n := s.promisedSnapshot(ctx, name); n > 0 {
			out[SnapshotKey(name)] = n
		}
	}
	return nil
}

func (s *store) promisedSnapshot(ctx context.Context, name string) int64 {
	defer s.locks.Lock(snapLock(name))()
	r, err := s.loadSnapshot(name)
	switch {
	case errors.Is(err, ErrNotFound):
		return 0
	case err != nil:
		s.log.Warn("snapshot left out of what volumes may still take: its record cannot be read", zap.String("snapshot", name), zap.Error(err))
		return 0
	case r.State == deleting:
		return 0
	case r.State == creating:
		n, err := s.d.footprint(&record{Size: r.Size})
		if err != nil {
			return r.Size
		}
		return n
	}
	n, err := s.d.snapshotPromised(ctx, r)
	if err != nil {
		s.log.Warn("snapshot counted with all it may take: what it takes cannot be measured", zap.String("snapshot", name), zap.Error(err))
		return r.Bytes
	}
	return n
}

// recoverSnapshots finishes or rolls back each snapshot's step: one being
// taken is rolled back, one being deleted is deleted, and one found
// removed by hand is forgotten.
func (s *store) recoverSnapshots(ctx context.Context) error {
	names, err := s.snapshots().names()
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		if err := s.recoverSnapshot(ctx, name); err != nil {
			errs = append(errs, fmt.Errorf("recover snapshot %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func (s *store) recoverSnapshot(ctx context.Context, name string) error {
	defer s.locks.Lock(snapLock(name))()
	r, err := s.loadSnapshot(name)
	if err != nil {
		return err
	}
	switch r.State {
	case creating, deleting:
		if err := s.removeSnapshot(ctx, r); err != nil {
			return err
		}
		s.log.Info("unfinished snapshot removed", zap.String("snapshot", name))
		return nil
	case ready:
		found, err := s.d.snapshotExists(r)
		if err != nil || found {
			return err
		}
		if err := s.snapshots().remove(name); err != nil {
			return err
		}
		s.log.Info("snapshot removed by hand: forgotten", zap.String("snapshot", name), zap.String("volume", r.Source))
		return nil
	}
	return fmt.Errorf("record of snapshot %s has unknown state %q", name, r.State)
}

// makeSnapshotDirs makes the directory of the snapshots under the root
// and that of their records, and checks the first is a directory of its
// own (no symlink): every snapshot's path is under it.
func makeSnapshotDirs(cfg Config) error {
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, snapshotRecords), 0o700); err != nil {
		return fmt.Errorf("make snapshot state directory: %w", err)
	}
	dir := filepath.Join(cfg.Root, SnapshotDir)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make snapshot directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("snapshot directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("snapshot directory %s is not a directory (a symlink?); remove it", dir)
	}
	return nil
}
