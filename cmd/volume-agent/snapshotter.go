package main

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/volume-agent/volume-agent/internal/binder"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/local"
)

// localSnapshotter takes manifest mode's snapshots with the local
// provisioner's snapshot API, the one the CSI driver uses too.
type localSnapshotter struct{ p *local.Provisioner }

var _ binder.Snapshotter = localSnapshotter{}

func (s localSnapshotter) TakeSnapshot(ctx context.Context, pv *v1.PersistentVolume, name string) (binder.SnapshotInfo, error) {
	snap, err := s.p.Snapshot(ctx, pv, name)
	if err != nil {
		return binder.SnapshotInfo{}, err
	}
	created := snap.Created
	if created.IsZero() {
		created = time.Now()
	}
	return binder.SnapshotInfo{Size: *resource.NewQuantity(snap.Size, resource.BinarySI), Created: created}, nil
}

func (s localSnapshotter) DeleteSnapshot(ctx context.Context, name string) error {
	return s.p.DeleteSnapshot(ctx, name)
}

// snapshotters are the binder's Snapshotters: the local provisioner's,
// when it runs.
func (p *provisioners) snapshotters() map[string]binder.Snapshotter {
	if p == nil || p.local == nil {
		return nil
	}
	return map[string]binder.Snapshotter{provisioner.LocalName: localSnapshotter{p: p.local}}
}
