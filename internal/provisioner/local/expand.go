package local

import (
	"context"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
)

var _ provisioner.Expander = (*Provisioner)(nil)

// Expand grows the volume of pv, which this provisioner made, to size
// bytes online: the qgroup limit of a btrfs subvolume, or the image file
// and its file system, while pods keep it mounted. A plain directory
// (no AnnCapacity) has no size that anything checks: there is nothing to
// grow. A smaller size is refused (capacity.ErrShrink).
func (p *Provisioner) Expand(ctx context.Context, pv *v1.PersistentVolume, size int64) error {
	kind := pv.Annotations[AnnCapacity]
	if kind == "" {
		p.log.Info("local volume is a plain directory: no size to grow", zap.String("pv", pv.Name), zap.Int64("bytes", size))
		return nil
	}
	if _, err := p.backendName(pv, "expand"); err != nil {
		return err
	}
	v, err := p.volOf(pv, "expand")
	if err != nil {
		return err
	}
	return p.ExpandVolume(ctx, v, pv.Spec.Capacity.Storage().Value(), size)
}

// expand grows the volume name (a raw block volume when block) from size
// have to size want once the root has room for the difference of their
// footprints.
func (p *Provisioner) expand(ctx context.Context, name string, block bool, have, want int64) error {
	p.roomMu.Lock()
	defer p.roomMu.Unlock()
	if want > have {
		if err := p.makeRoom(ctx, "", p.footprint(want, block)-p.footprint(have, block)); err != nil {
			return err
		}
	}
	return p.cfg.Capacity.Expand(ctx, name, want)
}
