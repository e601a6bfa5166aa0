package local

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
	"github.com/volume-agent/volume-agent/internal/provisioner/storagedir"
)

// This file is the provisioner's lower-level API: volumes by their name
// under the root. Provision, Delete and Expand (a claim and its PV) and
// the CSI driver (internal/csi: a CreateVolume request and its record)
// both go through it, so the storage work has one code path.

// Params is what a class's parameters (or a CSI CreateVolume's) ask of a
// volume.
type Params struct {
	// Archive: the volume is renamed to archived-<name> on deletion
	// instead of removed (provisioner.ParamArchiveOnDelete).
	Archive bool
	// Enforce: the volume is one of the capacity backend, of the size
	// asked for (ParamEnforce); otherwise a plain directory.
	Enforce bool
}

// ParseParams reads the parameters params of the StorageClass class:
// only provisioner.ParamArchiveOnDelete and ParamEnforce, each "true" or
// "false"; anything else is refused, so that a misspelt parameter never
// deletes what was meant to be kept.
func ParseParams(class string, params map[string]string) (Params, error) {
	for _, param := range slices.Sorted(maps.Keys(params)) {
		if param != provisioner.ParamArchiveOnDelete && param != ParamEnforce {
			return Params{}, fmt.Errorf("StorageClass %s: unknown parameter %q: the %s provisioner takes only %s and %s; "+
				"nothing is provisioned from a class it does not understand (a misspelt parameter must never delete what was meant to be kept)",
				class, param, provisioner.LocalName, provisioner.ParamArchiveOnDelete, ParamEnforce)
		}
	}
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Parameters: params}
	archive, err := provisioner.ArchiveOnDelete(sc)
	if err != nil {
		return Params{}, err
	}
	enforce, err := enforced(sc)
	if err != nil {
		return Params{}, err
	}
	return Params{Archive: archive, Enforce: enforce}, nil
}

// Spec is a volume to make.
type Spec struct {
	// Name is the volume's name under the root: one path element, not
	// hidden (ValidName).
	Name string
	Params
	// Block: a raw block volume (an image on a loop device), enforced only.
	Block bool
	// Size is the volume's size in bytes (enforced volumes only).
	Size int64
	// Content, when set, is what the volume is made from (enforced only);
	// ContentSize, when known, the least size that holds it.
	Content     *capacity.Source
	ContentSize int64
	// Marker, for a plain directory, is the owner its marker names until
	// Commit (storagedir.CreateMarked); "" makes no marker.
	Marker string
}

// errPlainContent refuses a snapshot or a clone of a plain directory.
var errPlainContent = fmt.Errorf("a plain directory (%s \"false\") has no snapshots or clones: a copy of a live directory is not "+
	"point-in-time and its size is not enforced; use a class with %s: \"true\"", ParamEnforce, ParamEnforce)

// ErrTooSmall marks a volume asked to be made smaller than its content.
var ErrTooSmall = errors.New("smaller than its data source")

// ValidName checks a volume or snapshot name given by a caller: one path
// element, at most maxName bytes, not hidden (the root's own records and
// volumes set aside start with a dot).
func ValidName(name string) error {
	switch {
	case name == "" || strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("name %q: want a non-empty name without \"/\"", name)
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("name %q: starts with a dot (names the agent's own records)", name)
	case len(name) > maxName:
		return fmt.Errorf("name %q: longer than %d bytes", name, maxName)
	case strings.HasSuffix(name, capacity.ImageSuffix):
		return fmt.Errorf("name %q: ends with %s (names an image)", name, capacity.ImageSuffix)
	}
	return storagedir.ValidRel(name)
}

// CheckSpec refuses a volume this provisioner cannot make, of the
// StorageClass class.
func (p *Provisioner) CheckSpec(class string, s Spec) error {
	if err := ValidName(s.Name); err != nil {
		return fmt.Errorf("volume %w", err)
	}
	if s.Block && !s.Enforce {
		return fmt.Errorf("spec.volumeMode Block: StorageClass %s has %s \"false\", whose volumes are directories; "+
			"a raw block volume is an image of the claim's size, made by a class that enforces capacity", class, ParamEnforce)
	}
	if !s.Enforce {
		if s.Content != nil {
			return fmt.Errorf("StorageClass %s: %w", class, errPlainContent)
		}
		return nil
	}
	if s.ContentSize > s.Size {
		return fmt.Errorf("%w: %s asked for, and the data source holds %s: ask for at least %s", ErrTooSmall, bytesString(s.Size), bytesString(s.ContentSize), bytesString(s.ContentSize))
	}
	return p.checkEnforced(class, s)
}

// CreateVolume makes the volume s (checked by CheckSpec), or finds it,
// and returns its path: a plain directory, or a volume of the capacity
// backend once the root has room for it (ErrNoRoom otherwise).
func (p *Provisioner) CreateVolume(ctx context.Context, s Spec) (string, error) {
	dir, err := p.createVolume(ctx, s)
	if err == nil {
		p.changed()
	}
	return dir, err
}

func (p *Provisioner) createVolume(ctx context.Context, s Spec) (string, error) {
	if err := ValidName(s.Name); err != nil {
		return "", fmt.Errorf("volume %w", err)
	}
	if !s.Enforce {
		if s.Content != nil {
			return "", errPlainContent
		}
		return mount.Bounded(ctx, func() (string, error) {
			if s.Marker == "" {
				return storagedir.Create(p.cfg.Root, s.Name, volumeMode)
			}
			dir, _, err := storagedir.CreateMarked(p.cfg.Root, s.Name, volumeMode, s.Marker)
			return dir, err
		})
	}
	if p.cfg.Capacity == nil {
		return "", p.checkEnforced("(volume "+s.Name+")", s)
	}
	if s.Content != nil && s.Content.Snapshot != "" {
		// The snapshot says how large its volume was.
		info, err := p.SnapshotInfo(ctx, s.Content.Snapshot)
		if err != nil {
			return "", fmt.Errorf("data source snapshot %s: %w", s.Content.Snapshot, err)
		}
		if info.Size > s.Size {
			return "", fmt.Errorf("%w: %s asked for, and snapshot %s is of a volume of %s: ask for at least %s",
				ErrTooSmall, bytesString(s.Size), s.Content.Snapshot, bytesString(info.Size), bytesString(info.Size))
		}
	}
	p.roomMu.Lock()
	defer p.roomMu.Unlock()
	if err := p.makeRoom(ctx, s.Name, p.footprint(s.Size, s.Block)); err != nil {
		return "", err
	}
	return p.create(ctx, s)
}

// Vol is a volume that exists, as the lower-level API knows it.
type Vol struct {
	// Name is its name under the root.
	Name string
	// Capacity is the backend that made it (AnnCapacity), "" for a plain
	// directory.
	Capacity string
	Archive  bool
	Block    bool
	// Owner is the PV it was made for (for CSI: the CreateVolume name),
	// which errors and logs name; a plain directory is moved aside to
	// .pending-delete-<Owner>.
	Owner string
}

// check refuses a Vol whose name or owner is not one of ours.
func (v Vol) check() error {
	if err := ValidName(v.Name); err != nil {
		return fmt.Errorf("local volume of PV %s: %w", v.Owner, err)
	}
	if err := ValidName(v.Owner); err != nil {
		return fmt.Errorf("local volume of PV %s: %w", v.Name, err)
	}
	return nil
}

// DeleteVolume removes or archives (v.Archive) the volume v, as Delete
// does a PV's: refused (provisioner.ErrInUse) while a mount on this node
// shows it; gone already is not an error.
func (p *Provisioner) DeleteVolume(ctx context.Context, v Vol) error {
	if err := v.check(); err != nil {
		return err
	}
	err := p.deleteVol(ctx, v)
	if err == nil {
		p.changed()
	}
	return err
}

// ExpandVolume grows the volume v from have to want bytes, online, as
// Expand does a PV's. A plain directory has nothing to grow.
func (p *Provisioner) ExpandVolume(ctx context.Context, v Vol, have, want int64) error {
	if err := v.check(); err != nil {
		return err
	}
	if v.Capacity == "" {
		return nil
	}
	if err := p.checkKind("expand", v.Owner, v.Capacity); err != nil {
		return err
	}
	if err := p.expand(ctx, v.Name, v.Block, have, want); err != nil {
		return fmt.Errorf("expand local volume of PV %s: %w", v.Owner, err)
	}
	p.changed()
	p.log.Info("expanded local volume", zap.String("pv", v.Owner), zap.String("path", p.path(v.Name)), zap.Int64("bytes", want))
	return nil
}

// VolumeUsage measures the volume v of enforced capacity through its
// backend: its size, the bytes and (on ext4 images) inodes it holds.
func (p *Provisioner) VolumeUsage(ctx context.Context, v Vol) (capacity.Usage, error) {
	if err := v.check(); err != nil {
		return capacity.Usage{}, err
	}
	if v.Capacity == "" {
		return capacity.Usage{}, fmt.Errorf("local volume of PV %s: a plain directory has no capacity backend", v.Owner)
	}
	if err := p.checkKind("measure", v.Owner, v.Capacity); err != nil {
		return capacity.Usage{}, err
	}
	return p.cfg.Capacity.Usage(ctx, v.Name)
}

// Path is the path of the volume name under the root (the image of a raw
// block volume is Path(name)+capacity.ImageSuffix).
func (p *Provisioner) Path(name string) string { return p.path(name) }

func (p *Provisioner) path(name string) string { return filepath.Join(p.cfg.Root, name) }

// Root is the local path root.
func (p *Provisioner) Root() string { return p.cfg.Root }

// Kind is the capacity backend's kind, "" when there is none.
func (p *Provisioner) Kind() string {
	if p.cfg.Capacity == nil {
		return ""
	}
	return p.cfg.Capacity.Kind()
}

// snapshotter is the capacity backend's snapshots, or why there are none.
func (p *Provisioner) snapshotter() (capacity.Snapshotter, error) {
	if p.cfg.Capacity == nil {
		return nil, fmt.Errorf("the local path root %s has no capacity backend, so no snapshots or clones", p.cfg.Root)
	}
	sn, ok := p.cfg.Capacity.(capacity.Snapshotter)
	if !ok {
		return nil, fmt.Errorf("the %s capacity backend takes no snapshots and makes no clones (not supported by this version)", p.cfg.Capacity.Kind())
	}
	return sn, nil
}

// Snapshot takes the snapshot name of pv's volume, which this provisioner
// made with a capacity backend; a plain directory is refused. It is
// idempotent: the same name of the same volume returns it again.
func (p *Provisioner) Snapshot(ctx context.Context, pv *v1.PersistentVolume, name string) (capacity.Snapshot, error) {
	if pv == nil {
		return capacity.Snapshot{}, errors.New("snapshot local volume: no PV")
	}
	if !isEnforced(pv) {
		return capacity.Snapshot{}, fmt.Errorf("snapshot local volume of PV %s: %w", pv.Name, errPlainContent)
	}
	v, err := p.volOf(pv, "snapshot")
	if err != nil {
		return capacity.Snapshot{}, err
	}
	return p.SnapshotVolume(ctx, v, name)
}

// SnapshotVolume is Snapshot of the volume v.
func (p *Provisioner) SnapshotVolume(ctx context.Context, v Vol, name string) (capacity.Snapshot, error) {
	if err := v.check(); err != nil {
		return capacity.Snapshot{}, err
	}
	if err := ValidName(name); err != nil {
		return capacity.Snapshot{}, fmt.Errorf("snapshot local volume of PV %s: snapshot %w", v.Owner, err)
	}
	if v.Capacity == "" {
		return capacity.Snapshot{}, fmt.Errorf("snapshot local volume of PV %s: %w", v.Owner, errPlainContent)
	}
	if v.Block {
		return capacity.Snapshot{}, fmt.Errorf("snapshot local volume of PV %s: %w", v.Owner, capacity.ErrBlockSnapshot)
	}
	if err := p.checkKind("snapshot", v.Owner, v.Capacity); err != nil {
		return capacity.Snapshot{}, err
	}
	sn, err := p.snapshotter()
	if err != nil {
		return capacity.Snapshot{}, fmt.Errorf("snapshot local volume of PV %s: %w", v.Owner, err)
	}
	p.roomMu.Lock()
	s, err := sn.Snapshot(ctx, v.Name, name)
	p.roomMu.Unlock()
	if err != nil {
		return capacity.Snapshot{}, fmt.Errorf("snapshot local volume of PV %s: %w", v.Owner, err)
	}
	p.changed()
	p.log.Info("snapshot taken", zap.String("pv", v.Owner), zap.String("snapshot", name))
	return s, nil
}

// DeleteSnapshot removes the snapshot name; gone already is not an error.
// It is refused (capacity.ErrSnapshotBusy) while a volume is made from it.
func (p *Provisioner) DeleteSnapshot(ctx context.Context, name string) error {
	if err := ValidName(name); err != nil {
		return fmt.Errorf("delete snapshot: %w", err)
	}
	sn, err := p.snapshotter()
	if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", name, err)
	}
	if err := sn.DeleteSnapshot(ctx, name); err != nil {
		return err // the backend's errors name the snapshot (and, refused, what to wait for)
	}
	p.changed()
	p.log.Info("snapshot deleted", zap.String("snapshot", name))
	return nil
}

// SnapshotInfo describes the snapshot name (capacity.ErrNotFound when
// there is none).
func (p *Provisioner) SnapshotInfo(ctx context.Context, name string) (capacity.Snapshot, error) {
	if err := ValidName(name); err != nil {
		return capacity.Snapshot{}, fmt.Errorf("snapshot %w", err)
	}
	sn, err := p.snapshotter()
	if err != nil {
		return capacity.Snapshot{}, err
	}
	return sn.SnapshotInfo(ctx, name)
}

// Snapshots lists every snapshot; none when the backend takes none.
func (p *Provisioner) Snapshots(ctx context.Context) ([]capacity.Snapshot, error) {
	sn, err := p.snapshotter()
	if err != nil {
		return nil, nil //nolint:nilerr // no snapshotter: no snapshots
	}
	return sn.Snapshots(ctx)
}

// DirName is the name under the root of the volume of the claim
// namespace/claim provisioned as the PV pvName: the name Provision gives
// it, which the CSI driver gives too when it knows the claim.
func DirName(namespace, claim, pvName string) string { return dirName(namespace, claim, pvName) }
