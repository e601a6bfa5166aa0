package nfssubdir

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner/storagedir"
)

// MoveAside implements provisioner.Provisioner: it renames the
// subdirectory pv records to .pending-delete-<PV name> in the same parent,
// after the checks of Delete.
func (p *Provisioner) MoveAside(ctx context.Context, pv *v1.PersistentVolume) error {
	err := p.onTarget(ctx, pv, func(ctx context.Context, base string, t target) error {
		return storagedir.MoveAside(base, t.rel, storagedir.AsideRel(t.rel, pv.Name))
	})
	switch {
	case errors.Is(err, storagedir.ErrGone):
		p.log.Info("subdirectory to move aside is gone already", zap.String("pv", pv.Name))
	case err != nil:
		return fmt.Errorf("PersistentVolume %s: move aside: %w", pv.Name, err)
	default:
		p.log.Info("subdirectory moved aside until its deletion", zap.String("pv", pv.Name))
	}
	return nil
}

// Restore implements provisioner.Provisioner: it renames the subdirectory
// pv records back from aside.
func (p *Provisioner) Restore(ctx context.Context, pv *v1.PersistentVolume) error {
	err := p.onTarget(ctx, pv, func(ctx context.Context, base string, t target) error {
		return storagedir.Restore(base, t.rel, storagedir.AsideRel(t.rel, pv.Name))
	})
	if err != nil {
		return fmt.Errorf("PersistentVolume %s: restore: %w", pv.Name, err)
	}
	p.log.Info("subdirectory restored", zap.String("pv", pv.Name))
	return nil
}

// onTarget checks pv (parseTarget), mounts its export, checks that no
// mount on this node shows the subdirectory, in place or aside, and runs
// fn on it within the provisioner's timeout.
func (p *Provisioner) onTarget(ctx context.Context, pv *v1.PersistentVolume, fn func(ctx context.Context, base string, t target) error) error {
	t, err := parseTarget(pv)
	if err != nil {
		return fmt.Errorf("%w (nothing changed)", err)
	}
	p.ops.RLock()
	defer p.ops.RUnlock()
	base, err := p.mountExport(ctx, t.export, t.options)
	if err != nil {
		return err
	}
	return p.bounded(ctx, func(ctx context.Context) error {
		if err := storagedir.NotMounted(ctx, p.mounter, base, t.rel, storagedir.AsideRel(t.rel, pv.Name)); err != nil {
			return err
		}
		return fn(ctx, base, t)
	})
}
