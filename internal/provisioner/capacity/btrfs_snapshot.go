package capacity

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"

	"github.com/volume-agent/volume-agent/internal/btrfs"
)

// A btrfs snapshot is a read-only snapshot of the volume's subvolume,
// <root>/.snapshots/<name>: O(1), sharing every extent with the volume
// until either is written. A volume made from a snapshot or cloned from a
// volume is a writable snapshot of it with its own qgroup and limit.
// Snapshots are not recursive: a subvolume a pod made inside the volume
// would be an empty directory in the snapshot, and so in every volume made
// from it; a volume holding one is neither snapshotted nor cloned
// (ErrNestedSubvolumes, TestBtrfsCopyRefusedWithNestedSubvolumes).

func (b *btrfsDriver) snapDir(s *record) string { return filepath.Join(b.root, SnapshotDir, s.Name) }

func (b *btrfsDriver) snapshotExists(s *record) (bool, error) { return lexists(b.snapDir(s)) }

// snapshot takes a read-only snapshot of v's subvolume, checked to be the
// one recorded. Bytes is what the snapshot references, as its qgroup
// counts it once btrfs(8) has committed it: what it keeps of the root
// once the volume has overwritten all of it. With quotas off it is
// unknown, and v's size stands for it.
func (b *btrfsDriver) snapshot(ctx context.Context, v, s *record, save func() error) error {
	src := b.dir(v)
	id, err := b.recorded(ctx, v, src)
	if err != nil {
		return err
	}
	if id == 0 {
		return fmt.Errorf("subvolume %s is missing", src)
	}
	if err := noNested(src); err != nil {
		return err
	}
	dst := b.snapDir(s)
	if err := b.tool.Snapshot(ctx, src, dst, true); err != nil {
		return err
	}
	// A subvolume made between the check and the snapshot is missing
	// from it: look again, and roll the snapshot back if one is there.
	if err := noNested(src); err != nil {
		return err
	}
	if s.ID, err = b.tool.SubvolumeID(ctx, dst); err != nil {
		return err
	}
	s.Bytes = s.Size
	q, err := b.tool.QgroupOf(ctx, dst, s.ID)
	switch {
	case errors.Is(err, btrfs.ErrQuotasOff):
	case err != nil:
		return err
	default:
		s.Bytes = int64(min(q.Referenced, math.MaxInt64)) //nolint:gosec // G115: bounded just before
	}
	return save()
}

// removeSnapshot deletes the snapshot's subvolume (checked to be the one
// recorded, or any when none is recorded yet: .snapshots holds only
// ours), waits for the kernel to drop it and destroys its qgroup.
func (b *btrfsDriver) removeSnapshot(ctx context.Context, s *record, save func() error) error {
	dir := b.snapDir(s)
	id, err := b.recorded(ctx, s, dir)
	if err != nil {
		return err
	}
	if id != 0 {
		s.ID = id
		if err := save(); err != nil { // the qgroup's name, for after a crash
			return err
		}
		if err := b.tool.DeleteSubvolumeID(ctx, filepath.Dir(dir), id); err != nil {
			return err
		}
	}
	if s.ID == 0 {
		return nil // never made
	}
	return b.destroyQgroup(ctx, s.ID)
}

// createFrom makes v a writable snapshot of the snapshot or the volume
// from (checked to be the subvolume recorded), limited to v.Size like any
// volume. It keeps the mode and owner of the source's root directory.
func (b *btrfsDriver) createFrom(ctx context.Context, v, from *record, save func() error) error {
	if err := b.quotasOn(ctx); err != nil {
		return err
	}
	src := b.dir(from)
	if from.Kind == snapshotKind {
		src = b.snapDir(from)
	}
	id, err := b.recorded(ctx, from, src)
	if err != nil {
		return err
	}
	if id == 0 {
		return fmt.Errorf("subvolume %s is missing", src)
	}
	if from.Kind != snapshotKind { // a snapshot holds none: see snapshot
		if err := noNested(src); err != nil {
			return err
		}
	}
	dir := b.dir(v)
	if err := b.tool.Snapshot(ctx, src, dir, false); err != nil {
		return err
	}
	if from.Kind != snapshotKind {
		if err := noNested(src); err != nil {
			return err
		}
	}
	if v.ID, err = b.tool.SubvolumeID(ctx, dir); err != nil {
		return err
	}
	if err := save(); err != nil {
		return err
	}
	return b.limit(ctx, v)
}

// snapshotPromised is what the snapshot may still take: its Bytes less
// what it alone references already (its qgroup's exclusive bytes, which
// grow as the volume overwrites what they shared).
func (b *btrfsDriver) snapshotPromised(ctx context.Context, s *record) (int64, error) {
	q, err := b.tool.QgroupOf(ctx, b.snapDir(s), s.ID)
	if err != nil {
		return s.Bytes, err
	}
	return max(0, s.Bytes-int64(min(q.Exclusive, math.MaxInt64))), nil //nolint:gosec // G115: bounded just before
}

// shared is how many of the bytes the volume v references its own
// subvolume shares with others (a snapshot or the volume it was made
// from): they are counted by those, so a volume made from a snapshot
// counts only what it alone references as taken, and may still take its
// whole size (it can overwrite every shared extent).
func (b *btrfsDriver) shared(ctx context.Context, v *record) (int64, error) {
	if v.Origin == nil {
		return 0, nil
	}
	q, err := b.tool.QgroupOf(ctx, b.dir(v), v.ID)
	if err != nil {
		return 0, err
	}
	return int64(min(q.Referenced-min(q.Exclusive, q.Referenced), math.MaxInt64)), nil //nolint:gosec // G115: bounded just before
}

// noNested refuses a copy of the subvolume src while a pod's subvolume is
// inside it: btrfs snapshots are not recursive, and a copy missing what a
// nested subvolume holds would lose it silently for whoever restores it.
func noNested(src string) error {
	_, nested, err := btrfs.Nested(src)
	if len(nested) > 0 {
		return fmt.Errorf("%w: %d found below %s (ask whoever runs the pods using it to move their content into plain directories and delete them with btrfs subvolume delete, then retry)", ErrNestedSubvolumes, len(nested), src)
	}
	return err
}
