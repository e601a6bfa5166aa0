package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
	"github.com/volume-agent/volume-agent/internal/provisioner/storagedir"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// ParamEnforce is the class parameter that says whether a volume's size is
// enforced: "true" (the default) makes each volume a volume of
// Config.Capacity sized to the claim's request; "false" a plain directory
// whose size nothing checks.
const ParamEnforce = "enforce"

// defaultEnforce is ParamEnforce when a class does not set it.
const defaultEnforce = true

// AnnCapacity on a PV names the capacity backend that made its volume
// ("btrfs", "image"); a PV without it is a plain directory. Delete, MoveAside
// and Restore go by it, not by the class, which may have changed since.
const AnnCapacity = "volume-agent.io/capacity"

// enforced reads the class parameter enforce: "true" or "false" (any
// case); unset is defaultEnforce.
func enforced(class *storagev1.StorageClass) (bool, error) {
	v, ok := class.Parameters[ParamEnforce]
	switch {
	case !ok:
		return defaultEnforce, nil
	case strings.EqualFold(v, "true"):
		return true, nil
	case strings.EqualFold(v, "false"):
		return false, nil
	}
	return false, fmt.Errorf("StorageClass %s: parameter %s %q: want \"true\" or \"false\"", class.Name, ParamEnforce, v)
}

// checkEnforced refuses an enforced volume of the StorageClass class
// this agent cannot serve: one of no size, or when there is no capacity
// backend, or one that archives with a backend that cannot
// (capacity.Archiver).
func (p *Provisioner) checkEnforced(class string, s Spec) error {
	if s.Size <= 0 {
		return fmt.Errorf("StorageClass %s enforces capacity, and the claim requests no storage (spec.resources.requests.storage): "+
			"give the claim a size, or the class %s \"false\"", class, ParamEnforce)
	}
	if p.cfg.Capacity == nil {
		why := "no capacity backend"
		if p.cfg.NoCapacity != nil {
			why = p.cfg.NoCapacity.Error()
		}
		return fmt.Errorf("StorageClass %s enforces capacity (parameter %s, default %t), and the local path root %s cannot: %s; "+
			"fix the root, or give the class %s \"false\" for plain directories of unchecked size", class, ParamEnforce, defaultEnforce, p.cfg.Root, why, ParamEnforce)
	}
	if _, ok := p.cfg.Capacity.(capacity.Archiver); s.Archive && !ok {
		return fmt.Errorf("StorageClass %s: parameter %s \"true\": the %s capacity backend cannot archive volumes; give the class %s \"false\"",
			class, provisioner.ParamArchiveOnDelete, p.cfg.Capacity.Kind(), ParamEnforce)
	}
	if s.Content == nil {
		return nil
	}
	if _, err := p.snapshotter(); err != nil {
		return fmt.Errorf("StorageClass %s: data source: %w", class, err)
	}
	if s.Block {
		return fmt.Errorf("StorageClass %s: a raw block volume (volumeMode Block) cannot be made from a snapshot or a volume (not supported): use volumeMode Filesystem", class)
	}
	return nil
}

// create makes the volume of enforced capacity of s: a directory, or for
// a claim of volumeMode Block an image on a loop device, whose path the
// PV names (the image backend keeps it attached across restarts), or a
// directory holding a copy of s.Content.
func (p *Provisioner) create(ctx context.Context, s Spec) (string, error) {
	if s.Content != nil {
		sn, err := p.snapshotter()
		if err != nil {
			return "", err
		}
		return sn.CreateFrom(ctx, s.Name, s.Size, *s.Content)
	}
	if !s.Block {
		return p.cfg.Capacity.Create(ctx, s.Name, s.Size)
	}
	bc, ok := p.cfg.Capacity.(capacity.BlockCreator)
	if !ok {
		return "", fmt.Errorf("spec.volumeMode Block: the %s capacity backend makes no raw block volumes", p.cfg.Capacity.Kind())
	}
	return bc.CreateBlock(ctx, s.Name, s.Size)
}

// exists reports whether the volume name of pv is there: its directory,
// or the image of a raw block volume.
func (p *Provisioner) exists(pv *v1.PersistentVolume, name string) (bool, error) {
	if !volume.Block(pv) {
		return storagedir.Exists(p.cfg.Root, name)
	}
	fi, err := os.Lstat(filepath.Join(p.cfg.Root, name+capacity.ImageSuffix))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case !fi.Mode().IsRegular():
		return false, fmt.Errorf("%s is not a regular file", fi.Name())
	}
	return true, nil
}

// enforcedName checks pv, whose volume a capacity backend made (ownedName,
// the backend is this agent's, and no mount other than the volume's own
// shows it), and returns its name under the root. what is for errors.
func (p *Provisioner) enforcedName(ctx context.Context, pv *v1.PersistentVolume, what string) (string, error) {
	name, err := p.backendName(pv, what)
	if err != nil {
		return "", err
	}
	return name, p.notInUse(ctx, what, pv.Name, name)
}

// notInUse refuses (ErrInUse) when a mount shows the capacity volume name
// of the PV pv. An image volume is itself a mount: only the mounts of others
// (a pod's bind mount) count.
func (p *Provisioner) notInUse(ctx context.Context, what, pv, name string) error {
	dir := filepath.Join(p.cfg.Root, name)
	users, err := mount.MountsOf(ctx, dir)
	if err != nil {
		return fmt.Errorf("%s local volume of PV %s: find the mounts of %s: %w", what, pv, dir, err)
	}
	if len(users) > 0 {
		return fmt.Errorf("%s local volume of PV %s: %w: mounted at %s", what, pv, provisioner.ErrInUse, strings.Join(users, ", "))
	}
	return nil
}

// backendName checks pv, whose volume a capacity backend made (ownedName,
// and the backend is this agent's), and returns its name under the root.
// what is for errors.
func (p *Provisioner) backendName(pv *v1.PersistentVolume, what string) (string, error) {
	name, err := p.ownedName(pv)
	if err != nil {
		return "", fmt.Errorf("%s local volume of PV %s: refusing: %w", what, pv.Name, err)
	}
	return name, p.checkKind(what, pv.Name, pv.Annotations[AnnCapacity])
}

// checkKind refuses a volume of the PV pv made by the capacity backend kind
// when this agent's backend is another one, or there is none.
func (p *Provisioner) checkKind(what, pv, kind string) error {
	switch {
	case p.cfg.Capacity == nil:
		return fmt.Errorf("%s local volume of PV %s: it was made by the %s capacity backend, and this agent has none for its local path root", what, pv, kind)
	case p.cfg.Capacity.Kind() != kind:
		return fmt.Errorf("%s local volume of PV %s: it was made by the %s capacity backend, and the local path root has %s: was the root moved to another file system?",
			what, pv, kind, p.cfg.Capacity.Kind())
	}
	return nil
}

// moveAsideEnforced keeps a capacity volume in place: it is a mount (an
// image) or a subvolume with a qgroup, which a rename would not keep
// whole. Its step is recorded by the caller (the binder's state, the PV's
// annotations); a released PV is bound to no claim, so no new pod reaches
// the volume meanwhile, and Restore has nothing to move back.
func (p *Provisioner) moveAsideEnforced(ctx context.Context, pv *v1.PersistentVolume) error {
	name, err := p.enforcedName(ctx, pv, "move aside")
	if err != nil {
		return err
	}
	ok, err := p.exists(pv, name)
	if err != nil {
		return fmt.Errorf("move aside local volume of PV %s: %w", pv.Name, err)
	}
	if !ok {
		p.log.Info("local volume to move aside is gone already", zap.String("pv", pv.Name))
		return nil
	}
	p.log.Info("local volume of enforced capacity kept in place until its deletion", zap.String("pv", pv.Name), zap.String("path", pv.Spec.Local.Path))
	return nil
}

// restoreEnforced finds a capacity volume in place (see moveAsideEnforced).
func (p *Provisioner) restoreEnforced(ctx context.Context, pv *v1.PersistentVolume) error {
	name, err := p.enforcedName(ctx, pv, "restore")
	if err != nil {
		return err
	}
	ok, err := p.exists(pv, name)
	if err == nil && !ok {
		err = provisioner.ErrGone
	}
	if err != nil {
		return fmt.Errorf("restore local volume of PV %s: %w", pv.Name, err)
	}
	p.log.Info("local volume restored", zap.String("pv", pv.Name), zap.String("path", pv.Spec.Local.Path))
	return nil
}

// deleteEnforced removes a capacity volume and all it used (its subvolume
// and qgroup, or its mount, loop device and image), or, when v says
// archive, keeps it as archived-<name> (archiveEnforced).
func (p *Provisioner) deleteEnforced(ctx context.Context, v Vol) error {
	if err := p.checkKind("delete", v.Owner, v.Capacity); err != nil {
		return err
	}
	if err := p.notInUse(ctx, "delete", v.Owner, v.Name); err != nil {
		return err
	}
	if v.Archive {
		return p.archiveEnforced(ctx, v)
	}
	if err := p.cfg.Capacity.Delete(ctx, v.Name); err != nil && !errors.Is(err, capacity.ErrNotFound) {
		return fmt.Errorf("delete local volume of PV %s: %w", v.Owner, err)
	}
	p.log.Info("removed local volume", zap.String("pv", v.Owner), zap.String("path", p.path(v.Name)))
	return nil
}

// archiveEnforced keeps the capacity volume v, with its data and its
// size, as archived-<name> under the root (its image renamed, or its
// subvolume with its qgroup): the backend's record of it survives
// restarts, and its room stays counted until the archive is removed. A
// volume archived already, or gone, is not an error.
func (p *Provisioner) archiveEnforced(ctx context.Context, v Vol) error {
	a, ok := p.cfg.Capacity.(capacity.Archiver)
	if !ok {
		return fmt.Errorf("archive local volume of PV %s: the %s capacity backend cannot archive volumes: its data is kept", v.Owner, p.cfg.Capacity.Kind())
	}
	log := p.log.With(zap.String("pv", v.Owner), zap.String("path", p.path(v.Name)))
	archive, err := a.Archive(ctx, v.Name)
	if errors.Is(err, capacity.ErrNotFound) {
		log.Info("local volume to archive is already gone")
		return nil
	}
	if err != nil {
		return fmt.Errorf("archive local volume of PV %s: %w", v.Owner, err)
	}
	log.Info("archived local volume", zap.String("archive", archive))
	return nil
}
