package nfssubdir

import (
	"context"
	"fmt"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/storagedir"
)

// Commit implements provisioner.Settler: pv exists, so the marker that a
// Tentative Provision wrote in its subdirectory goes.
func (p *Provisioner) Commit(ctx context.Context, pv *v1.PersistentVolume) error {
	p.recent.forget(pv.Name) // the caller lists its PV from now on
	t, err := parseTarget(pv)
	if err != nil {
		return fmt.Errorf("PersistentVolume %s: %w", pv.Name, err)
	}
	p.ops.RLock()
	defer p.ops.RUnlock()
	base, err := p.mountExport(ctx, t.export, t.options)
	if err != nil {
		return fmt.Errorf("PersistentVolume %s: %w", pv.Name, err)
	}
	unlock := p.paths.lock(t.export.server)
	defer unlock()
	err = p.bounded(ctx, func(context.Context) error { return storagedir.Unmark(base, t.rel, pv.Name) })
	if err != nil {
		return fmt.Errorf("PersistentVolume %s: %q in export %s: %w", pv.Name, t.rel, t.export, err)
	}
	return nil
}

// Abandon implements provisioner.Settler: pv will never be used. Its
// subdirectory is removed only when a Tentative Provision made it for pv
// (its marker names pv), the marker is all it holds, and no other PV of
// req.PVs uses it, holds it or is inside it. Anything else is kept: a
// directory that was there before holds someone's data, and so does one
// written to since it was made.
func (p *Provisioner) Abandon(ctx context.Context, req provisioner.Request, pv *v1.PersistentVolume) (kept string, err error) {
	t, err := parseTarget(pv)
	if err != nil {
		return "", fmt.Errorf("PersistentVolume %s: %w (nothing deleted)", pv.Name, err)
	}
	p.ops.RLock()
	defer p.ops.RUnlock()
	base, err := p.mountExport(ctx, t.export, t.options)
	if err != nil {
		return "", fmt.Errorf("PersistentVolume %s: %w", pv.Name, err)
	}
	unlock := p.paths.lock(t.export.server)
	defer unlock()
	log := p.log.With(zap.String("pv", pv.Name), zap.String("export", t.export.String()), zap.String("path", t.rel))
	defer func() {
		if err == nil {
			p.recent.forget(pv.Name) // its PV will never exist
		}
	}()
	if other := overlapping(p.recent.with(existing(req)), pv.Name, t.export, t.rel); other != nil {
		err := p.bounded(ctx, func(context.Context) error { return storagedir.Unmark(base, t.rel, pv.Name) })
		if err != nil {
			return "", fmt.Errorf("PersistentVolume %s: %q in export %s: %w", pv.Name, t.rel, t.export, err)
		}
		return fmt.Sprintf("%q in export %s is kept: PersistentVolume %s uses %s:%s", t.rel, t.export, other.Name, other.Spec.NFS.Server, other.Spec.NFS.Path), nil
	}
	var out storagedir.Outcome
	err = p.bounded(ctx, func(context.Context) error {
		var err error
		out, err = storagedir.RemoveMarked(base, t.rel, pv.Name)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("PersistentVolume %s: remove %q in export %s: %w", pv.Name, t.rel, t.export, err)
	}
	switch out {
	case storagedir.Removed:
		log.Info("subdirectory of an abandoned volume removed")
	case storagedir.KeptNotMade:
		return fmt.Sprintf("%q in export %s is kept: it was there before this provisioning (it has no %s naming %s)",
			t.rel, t.export, storagedir.MarkerName, pv.Name), nil
	case storagedir.KeptNotEmpty:
		return fmt.Sprintf("%q in export %s is kept: files were written in it after it was made", t.rel, t.export), nil
	}
	return "", nil
}
