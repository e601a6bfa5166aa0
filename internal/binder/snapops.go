package binder

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Snapshotter takes and deletes the snapshots of the volumes of one
// provisioner (the local provisioner's, through its snapshot API).
type Snapshotter interface {
	// TakeSnapshot takes a snapshot named name of the storage of pv,
	// which this provisioner made, or finds the one an earlier call of
	// the same name and volume took. A name taken by another volume's
	// snapshot is an error.
	TakeSnapshot(ctx context.Context, pv *v1.PersistentVolume, name string) (SnapshotInfo, error)
	// DeleteSnapshot deletes the snapshot name; one gone is not an error.
	// It refuses while a volume is being made from it.
	DeleteSnapshot(ctx context.Context, name string) error
}

// SnapshotInfo is what a taken snapshot is.
type SnapshotInfo struct {
	// Size is the size of the volume it was taken of: a volume made from
	// it has at least this size.
	Size resource.Quantity
	// Created is when it was taken.
	Created time.Time
}

// The operations on snapshots, as opResult.what names them.
const (
	opSnapshot       = "snapshot"
	opDeleteSnapshot = "delete-snapshot"
)

// launchSnapshot takes or deletes the snapshot of op with its
// provisioner's Snapshotter.
func (ops *operations) launchSnapshot(ctx context.Context, op snapshotOp) {
	r := op.r
	ops.launchCall(ctx, r.Handle, func(ctx context.Context) opResult {
		s, ok := ops.snapshotters[r.Provisioner]
		if !ok {
			return opResult{pv: r.Handle, what: string(op.step), err: fmt.Errorf("snapshot %q of VolumeSnapshot %s: provisioner %q takes no snapshots on this agent",
				r.Handle, r.key(), r.Provisioner)}
		}
		if op.step == snapDeleting {
			err := s.DeleteSnapshot(ctx, r.Handle)
			if err != nil {
				err = fmt.Errorf("delete snapshot %q of VolumeSnapshot %s with %s: %w", r.Handle, r.key(), r.Provisioner, err)
			}
			return opResult{pv: r.Handle, what: opDeleteSnapshot, err: err}
		}
		info, err := s.TakeSnapshot(ctx, r.PV, r.Handle)
		if err != nil {
			err = fmt.Errorf("take snapshot %q of PersistentVolume %q (claim %s/%s) for VolumeSnapshot %s with %s: %w",
				r.Handle, r.PV.Name, r.Namespace, r.Claim, r.key(), r.Provisioner, err)
		}
		return opResult{pv: r.Handle, what: opSnapshot, snap: info, err: err}
	})
}
