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
	"github.com/volume-agent/volume-agent/internal/provisioner/storagedir"
)

// Delete removes the directory of pv, or renames it to archived-<name>
// when pv's AnnArchiveOnDelete is "true". It first checks that pv points
// at a directory this provisioner could have made (see ownedName); a
// directory already gone is not an error.
func (p *Provisioner) Delete(ctx context.Context, pv *v1.PersistentVolume) error {
	if pv == nil {
		return errors.New("delete local volume: no PV")
	}
	name, err := p.ownedName(pv)
	if err != nil {
		return fmt.Errorf("delete local volume of PV %s: refusing: %w", pv.Name, err)
	}
	log := p.log.With(zap.String("pv", pv.Name), zap.String("path", pv.Spec.Local.Path))
	if pv.Annotations[provisioner.AnnArchiveOnDelete] != "true" {
		if err := storagedir.Remove(ctx, p.cfg.Mounter, p.cfg.Root, name); err != nil {
			return fmt.Errorf("delete local volume of PV %s: %w", pv.Name, err)
		}
		log.Info("removed local volume")
		return nil
	}
	archived, err := mount.Bounded(ctx, func() (string, error) { return storagedir.Archive(p.cfg.Root, name) })
	if errors.Is(err, storagedir.ErrGone) {
		log.Info("local volume to archive is already gone")
		return nil
	}
	if err != nil {
		return fmt.Errorf("archive local volume of PV %s: %w", pv.Name, err)
	}
	log.Info("archived local volume", zap.String("archive", archived))
	return nil
}

// ownedName returns the name under the root of pv's directory, when pv
// could be one this provisioner made: a local PV whose path is directly
// under the root, named "...-<PV name>", and pinned to this node.
func (p *Provisioner) ownedName(pv *v1.PersistentVolume) (string, error) {
	if pv.Spec.Local == nil {
		return "", errors.New("spec.local is not set")
	}
	path := pv.Spec.Local.Path
	if filepath.Clean(path) != path || filepath.Dir(path) != p.cfg.Root {
		return "", fmt.Errorf("spec.local.path %q is not directly under the local path root %s", path, p.cfg.Root)
	}
	name := filepath.Base(path)
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
