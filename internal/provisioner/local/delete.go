package local

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
	"github.com/volume-agent/volume-agent/internal/provisioner/storagedir"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// MoveAside renames the directory of pv to .pending-delete-<PV name> in
// the root, once it has checked that pv points at a directory this
// provisioner could have made (see ownedName) and that no mount shows it.
// Already aside, or gone, is not an error. A volume of enforced capacity
// is kept in place instead (moveAsideEnforced).
func (p *Provisioner) MoveAside(ctx context.Context, pv *v1.PersistentVolume) error {
	if isEnforced(pv) {
		return p.moveAsideEnforced(ctx, pv)
	}
	name, aside, err := p.names(ctx, pv, "move aside")
	if err != nil {
		return err
	}
	_, err = mount.Bounded(ctx, func() (struct{}, error) {
		return struct{}{}, storagedir.MoveAside(p.cfg.Root, name, aside)
	})
	switch {
	case errors.Is(err, storagedir.ErrGone):
		p.log.Info("local volume to move aside is gone already", zap.String("pv", pv.Name))
	case err != nil:
		return fmt.Errorf("move aside local volume of PV %s: %w", pv.Name, err)
	default:
		p.log.Info("local volume moved aside until its deletion", zap.String("pv", pv.Name), zap.String("aside", filepath.Join(p.cfg.Root, aside)))
	}
	return nil
}

// Restore renames the directory of pv back from aside. Already in place is
// not an error; gone is (it wraps provisioner.ErrGone).
func (p *Provisioner) Restore(ctx context.Context, pv *v1.PersistentVolume) error {
	if isEnforced(pv) {
		return p.restoreEnforced(ctx, pv)
	}
	name, aside, err := p.names(ctx, pv, "restore")
	if err != nil {
		return err
	}
	_, err = mount.Bounded(ctx, func() (struct{}, error) {
		return struct{}{}, storagedir.Restore(p.cfg.Root, name, aside)
	})
	if err != nil {
		return fmt.Errorf("restore local volume of PV %s: %w", pv.Name, err)
	}
	p.log.Info("local volume restored", zap.String("pv", pv.Name), zap.String("path", pv.Spec.Local.Path))
	return nil
}

// Delete removes the directory of pv, aside or in place, or renames it to
// archived-<name> when pv's AnnArchiveOnDelete is "true", with the checks
// of MoveAside. A directory already gone is not an error. A volume of
// enforced capacity is removed by its backend (deleteEnforced).
func (p *Provisioner) Delete(ctx context.Context, pv *v1.PersistentVolume) error {
	err := p.delete(ctx, pv)
	if err == nil {
		p.changed()
	}
	return err
}

func (p *Provisioner) delete(ctx context.Context, pv *v1.PersistentVolume) error {
	v, err := p.volOf(pv, "delete")
	if err != nil {
		return err
	}
	return p.deleteVol(ctx, v)
}

// volOf checks pv (ownedName; for a volume of enforced capacity, that the
// backend is this agent's) and describes its volume. what is for errors.
func (p *Provisioner) volOf(pv *v1.PersistentVolume, what string) (Vol, error) {
	if pv == nil {
		return Vol{}, fmt.Errorf("%s local volume: no PV", what)
	}
	name, err := p.ownedName(pv)
	if err != nil {
		return Vol{}, fmt.Errorf("%s local volume of PV %s: refusing: %w", what, pv.Name, err)
	}
	return Vol{Name: name, Capacity: pv.Annotations[AnnCapacity], Archive: pv.Annotations[provisioner.AnnArchiveOnDelete] == "true",
		Block: volume.Block(pv), Owner: pv.Name}, nil
}

// deleteVol removes or archives v, whose name and owner were checked.
func (p *Provisioner) deleteVol(ctx context.Context, v Vol) error {
	if v.Capacity != "" {
		return p.deleteEnforced(ctx, v)
	}
	aside := storagedir.AsideRel(v.Name, v.Owner)
	if err := storagedir.NotMounted(ctx, p.cfg.Mounter, p.cfg.Root, v.Name, aside); err != nil {
		return fmt.Errorf("delete local volume of PV %s: %w", v.Owner, err)
	}
	log := p.log.With(zap.String("pv", v.Owner), zap.String("path", p.path(v.Name)))
	if !v.Archive {
		for _, rel := range []string{aside, v.Name} {
			if err := storagedir.Remove(ctx, p.cfg.Mounter, p.cfg.Root, rel); err != nil {
				return fmt.Errorf("delete local volume of PV %s: %w", v.Owner, err)
			}
		}
		log.Info("removed local volume")
		return nil
	}
	archived, err := mount.Bounded(ctx, func() (string, error) { return storagedir.ArchiveVolume(p.cfg.Root, v.Name, aside) })
	if errors.Is(err, storagedir.ErrGone) {
		log.Info("local volume to archive is already gone")
		return nil
	}
	if err != nil {
		return fmt.Errorf("archive local volume of PV %s: %w", v.Owner, err)
	}
	log.Info("archived local volume", zap.String("archive", archived))
	return nil
}

// isEnforced reports whether a capacity backend made pv's volume.
func isEnforced(pv *v1.PersistentVolume) bool {
	return pv != nil && pv.Annotations[AnnCapacity] != ""
}

// names checks pv (ownedName) and that no mount shows its directory, in
// place or aside, and returns both names under the root. what is for errors.
func (p *Provisioner) names(ctx context.Context, pv *v1.PersistentVolume, what string) (string, string, error) {
	if pv == nil {
		return "", "", fmt.Errorf("%s local volume: no PV", what)
	}
	name, err := p.ownedName(pv)
	if err != nil {
		return "", "", fmt.Errorf("%s local volume of PV %s: refusing: %w", what, pv.Name, err)
	}
	aside := storagedir.AsideRel(name, pv.Name)
	if err := storagedir.NotMounted(ctx, p.cfg.Mounter, p.cfg.Root, name, aside); err != nil {
		return "", "", fmt.Errorf("%s local volume of PV %s: %w", what, pv.Name, err)
	}
	return name, aside, nil
}

// ownedName returns the name under the root of pv's directory, when pv
// could be one this provisioner made: a local PV whose path is directly
// under the root, named "...-<PV name>" (or "...-<PV name>.img", the
// image of a raw block volume of a capacity backend), and pinned to this
// node.
func (p *Provisioner) ownedName(pv *v1.PersistentVolume) (string, error) {
	if pv.Spec.Local == nil {
		return "", errors.New("spec.local is not set")
	}
	path := pv.Spec.Local.Path
	if filepath.Clean(path) != path || filepath.Dir(path) != p.cfg.Root {
		return "", fmt.Errorf("spec.local.path %q is not directly under the local path root %s", path, p.cfg.Root)
	}
	name := filepath.Base(path)
	if volume.Block(pv) {
		// A raw block volume: the PV names its image, <name>.img.
		var ok bool
		if name, ok = strings.CutSuffix(name, capacity.ImageSuffix); !ok || !isEnforced(pv) {
			return "", fmt.Errorf("spec.local.path %q of a PV of volumeMode Block is not an image of a capacity backend (<name>%s)", path, capacity.ImageSuffix)
		}
	}
	if pv.Name == "" || len(name) <= len(pv.Name)+1 || !strings.HasSuffix(name, "-"+pv.Name) {
		return "", fmt.Errorf("spec.local.path %q does not end with \"-<PV name>\"", path)
	}
	if err := storagedir.ValidRel(name); err != nil {
		return "", fmt.Errorf("spec.local.path: %w", err)
	}
	if !pinnedTo(pv.Spec.NodeAffinity, p.cfg.NodeName) {
		return "", fmt.Errorf("spec.nodeAffinity does not pin it to this node %q", p.cfg.NodeName)
	}
	return name, nil
}

// pinnedTo reports whether affinity requires node and no other: every
// required term has a kubernetes.io/hostname In [node] expression.
func pinnedTo(affinity *v1.VolumeNodeAffinity, node string) bool {
	if affinity == nil || affinity.Required == nil || len(affinity.Required.NodeSelectorTerms) == 0 {
		return false
	}
	for _, term := range affinity.Required.NodeSelectorTerms {
		if !termPins(term, node) {
			return false
		}
	}
	return true
}

func termPins(term v1.NodeSelectorTerm, node string) bool {
	for _, e := range term.MatchExpressions {
		if e.Key == v1.LabelHostname && e.Operator == v1.NodeSelectorOpIn && len(e.Values) == 1 && e.Values[0] == node {
			return true
		}
	}
	return false
}
