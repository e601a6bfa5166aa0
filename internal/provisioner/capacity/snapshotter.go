package capacity

import (
	"context"
	"errors"
	"time"
)

// Snapshotter is implemented by a Backend that can take point-in-time
// snapshots of its volumes and make new volumes from a snapshot or from
// another volume (a clone): btrfs with read-only subvolume snapshots,
// images with reflink or sparse copies.
type Snapshotter interface {
	// Snapshot takes the snapshot snap of the volume source. It is
	// idempotent: the same snap of the same source returns it again; snap
	// taken of another source fails (ErrExists).
	Snapshot(ctx context.Context, source, snap string) (Snapshot, error)
	// DeleteSnapshot removes snap; gone already is not an error. It is
	// refused (ErrSnapshotBusy) while a volume is being made from it.
	DeleteSnapshot(ctx context.Context, snap string) error
	// Snapshots lists every snapshot.
	Snapshots(ctx context.Context) ([]Snapshot, error)
	// SnapshotInfo describes snap (ErrNotFound when it has no record).
	SnapshotInfo(ctx context.Context, snap string) (Snapshot, error)
	// CreateFrom is Create with the content of src.
	CreateFrom(ctx context.Context, name string, size int64, src Source) (string, error)
}

// Source is what CreateFrom copies: a snapshot or a volume (a clone).
// Exactly one is set.
type Source struct{ Snapshot, Volume string }

// Snapshot describes one snapshot.
type Snapshot struct {
	Name string
	// Source is the volume it was taken of.
	Source string
	// Size is the source volume's size when it was taken: a volume made
	// from it is at least that large.
	Size    int64
	Created time.Time
	// Bytes is what it takes of the root's file system.
	Bytes int64
}

// ErrSnapshotBusy: a volume is being made from the snapshot.
var ErrSnapshotBusy = errors.New("a volume is being made from the snapshot")
