package nfssubdir

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/storagedir"
)

// The annotations of a PV this provisioner made, besides
// provisioner.AnnArchiveOnDelete: what Delete trusts, with the PV's nfs
// source, to find the subdirectory.
const (
	// AnnExport is the export the subdirectory is in: "server:/path".
	AnnExport = "volume-agent.io/nfs-subdir-export"
	// AnnSubdir is the subdirectory, relative to the export.
	AnnSubdir = "volume-agent.io/nfs-subdir-path"
)

// DefaultTimeout bounds each mount and each file-system call on an export
// when Config.Timeout is zero.
const DefaultTimeout = time.Minute

// Config is what a Provisioner needs.
type Config struct {
	// RootDir is the agent's --root-dir: exports are mounted under
	// <RootDir>/plugins/volume-agent.io~nfs-subdir/mounts. Required.
	RootDir string
	// Exports mounts the exports: the agent's *nfs.Plugin. Required.
	Exports ExportMounter
	// Mounter tells mount points apart, so that removing a subdirectory
	// never crosses one; mount.System{} when nil.
	Mounter mount.Mounter
	// Timeout bounds each mount and each file-system call on an export, so
	// that a server that stops answering fails the call; DefaultTimeout
	// when zero.
	Timeout time.Duration
	// Logger is named "nfs-subdir" here; nothing is logged when nil.
	Logger *zap.Logger
}

// Provisioner provisions subdirectories of NFS exports. Only the agent
// holding the provisioner's leadership may call it.
type Provisioner struct {
	exports   ExportMounter
	mounter   mount.Mounter
	mountsDir string
	timeout   time.Duration
	log       *zap.Logger

	// ops is held shared by each Provision and Delete while it uses an
	// export mount, and exclusively by Close while it takes them down.
	ops sync.RWMutex
	// paths is held per server from the check that a directory is free to
	// the marker that takes it, and while a marker is given up.
	paths serverLocks
	// recent are the volumes this process provisioned that the callers'
	// lists of PVs (Request.PVs) have not shown yet.
	recent recentVolumes
}

var (
	_ provisioner.Provisioner = (*Provisioner)(nil)
	_ provisioner.Settler     = (*Provisioner)(nil)
)

// New returns the provisioner cfg describes. It touches nothing: leftover
// mounts of an earlier run are reused by the next call on their export,
// or taken down by Close.
func New(cfg Config) (*Provisioner, error) {
	if cfg.RootDir == "" || cfg.Exports == nil {
		return nil, errors.New("nfs-subdir provisioner: RootDir and Exports are required")
	}
	root, err := filepath.Abs(cfg.RootDir)
	if err != nil {
		return nil, fmt.Errorf("nfs-subdir provisioner: root directory: %w", err)
	}
	p := &Provisioner{
		exports:   cfg.Exports,
		mounter:   cfg.Mounter,
		mountsDir: layout.Root(root).PluginMountsDir(layout.EscapePluginName(provisioner.NFSSubdirName)),
		timeout:   cfg.Timeout,
		log:       cfg.Logger,
	}
	if p.mounter == nil {
		p.mounter = mount.System{}
	}
	if p.timeout <= 0 {
		p.timeout = DefaultTimeout
	}
	if p.log == nil {
		p.log = zap.NewNop()
	}
	p.log = p.log.Named("nfs-subdir")
	return p, nil
}

// Name implements provisioner.Provisioner.
func (p *Provisioner) Name() string { return provisioner.NFSSubdirName }

// Provision implements provisioner.Provisioner: it creates the claim's
// subdirectory of the class's export (mode 0777, as the export's clients
// run as any user), or finds the one an earlier call made, or reuses one
// that was there already and that nothing claims: a pathPattern's only
// while it is empty (see the package doc). It refuses a
// subdirectory that is, holds or is inside the directory of another PV of
// req.PVs, or that is being provisioned for another PV (its marker says
// so). With req.Tentative, a directory it makes is marked for req.PVName
// until Commit or Abandon.
func (p *Provisioner) Provision(ctx context.Context, req provisioner.Request) (provisioner.Volume, error) {
	c, err := parseClass(req.Class)
	if err != nil {
		return provisioner.Volume{}, err
	}
	rel, err := subdir(c, req)
	if err != nil {
		return provisioner.Volume{}, err
	}
	p.ops.RLock()
	defer p.ops.RUnlock()
	base, err := p.mountExport(ctx, c.export, c.options)
	if err != nil {
		return provisioner.Volume{}, fmt.Errorf("StorageClass %s: %w", c.name, err)
	}
	unlock := p.paths.lock(c.export.server)
	defer unlock()
	if other := overlapping(p.recent.with(existing(req)), req.PVName, c.export, rel); other != nil {
		if other.Annotations[annRecent] != "" {
			return provisioner.Volume{}, fmt.Errorf("StorageClass %s: %q in export %s: %s:%s is being provisioned for %s (its PersistentVolume is not recorded yet): a volume never shares, holds or is inside another's directory",
				c.name, rel, c.export, other.Spec.NFS.Server, other.Spec.NFS.Path, other.Name)
		}
		return provisioner.Volume{}, fmt.Errorf("StorageClass %s: %q in export %s: PersistentVolume %s uses %s:%s: a volume never shares, holds or is inside another's directory",
			c.name, rel, c.export, other.Name, other.Spec.NFS.Server, other.Spec.NFS.Path)
	}
	made, err := p.take(ctx, base, c, req, rel)
	if err != nil {
		return provisioner.Volume{}, err
	}
	fields := []zap.Field{zap.String("pv", req.PVName), zap.String("export", c.export.String()), zap.String("path", rel)}
	if req.Tentative {
		fields = append(fields, zap.Bool("made", made)) // false: it was there before
	}
	p.log.Info("subdirectory provisioned", fields...)
	src := &v1.NFSVolumeSource{Server: c.export.server, Path: path.Join(c.export.path, rel)}
	p.recent.add(req.PVName, src)
	return provisioner.Volume{
		Source: v1.PersistentVolumeSource{NFS: src},
		Annotations: map[string]string{
			provisioner.AnnArchiveOnDelete: strconv.FormatBool(c.archive),
			AnnExport:                      c.export.String(),
			AnnSubdir:                      rel,
		},
	}, nil
}

// take creates or takes the directory rel of c's export, mounted at base,
// for req, and reports whether it carries req's marker (made for it). A
// pattern's directory that is there already is taken only while it holds
// nothing, unless it is req's (its marker, or its PV in req.PVs): a
// claim's author must never be handed what someone else left there.
func (p *Provisioner) take(ctx context.Context, base string, c class, req provisioner.Request, rel string) (bool, error) {
	owner := ""
	if req.Tentative {
		owner = req.PVName
	}
	create := storagedir.CreateMarked
	if c.pattern != "" && !isOwn(existing(req), req.PVName, c.export, rel) {
		create = storagedir.CreateMarkedEmpty
	}
	var made bool
	err := p.bounded(ctx, func(context.Context) error {
		var err error
		_, made, err = create(base, rel, 0o777, owner)
		return err
	})
	if errors.Is(err, storagedir.ErrNotEmpty) {
		from := patternSources(c.pattern)
		return false, fmt.Errorf("StorageClass %s: pathPattern %q for claim %s/%s gives %q in export %s (from %s): %w; "+
			"nothing that is there already is handed to a claim. To provision, change %s to a path that does not exist yet, "+
			"or have the export's administrator move that directory's content away (existing data is given to a claim with a static PersistentVolume)",
			c.name, c.pattern, req.Claim.Namespace, req.Claim.Name, rel, c.export, from, err, from)
	}
	if err != nil {
		return false, fmt.Errorf("StorageClass %s: create %q in export %s: %w", c.name, rel, c.export, err)
	}
	return made, nil
}

// Delete implements provisioner.Provisioner: it archives (into
// storagedir.ArchiveDir, named by archiveName) or removes the subdirectory
// pv records, aside or in place, after checking that pv is one this
// provisioner made and points exactly there.
func (p *Provisioner) Delete(ctx context.Context, pv *v1.PersistentVolume) (err error) {
	t, err := parseTarget(pv)
	if err != nil {
		return fmt.Errorf("PersistentVolume %s: %w (nothing deleted)", pv.Name, err)
	}
	p.ops.RLock()
	defer p.ops.RUnlock()
	base, err := p.mountExport(ctx, t.export, t.options)
	if err != nil {
		return fmt.Errorf("PersistentVolume %s: %w", pv.Name, err)
	}
	log := p.log.With(zap.String("pv", pv.Name), zap.String("export", t.export.String()), zap.String("path", t.rel))
	defer func() {
		if err == nil {
			p.recent.forget(pv.Name)
		}
	}()
	aside := storagedir.AsideRel(t.rel, pv.Name)
	if err := p.bounded(ctx, func(ctx context.Context) error { return storagedir.NotMounted(ctx, p.mounter, base, t.rel, aside) }); err != nil {
		return fmt.Errorf("PersistentVolume %s: %w", pv.Name, err)
	}
	if !t.archive {
		err := p.bounded(ctx, func(ctx context.Context) error {
			return errors.Join(storagedir.Remove(ctx, p.mounter, base, aside), storagedir.Remove(ctx, p.mounter, base, t.rel))
		})
		if err != nil {
			return fmt.Errorf("PersistentVolume %s: remove %q in export %s: %w", pv.Name, t.rel, t.export, err)
		}
		log.Info("subdirectory removed")
		return nil
	}
	var to string
	err = p.bounded(ctx, func(context.Context) error {
		var err error
		to, err = storagedir.ArchiveInto(base, t.rel, aside, archiveName(pv))
		return err
	})
	switch {
	case errors.Is(err, storagedir.ErrGone) || errors.Is(err, fs.ErrNotExist):
		log.Info("subdirectory to archive is gone already")
	case err != nil:
		return fmt.Errorf("PersistentVolume %s: archive %q in export %s: %w", pv.Name, t.rel, t.export, err)
	default:
		log.Info("subdirectory archived", zap.String("to", to))
	}
	return nil
}

// bounded runs fn, which touches an export, within the provisioner's
// timeout (mount.Bounded): a server that does not answer fails the call
// and leaves fn to finish, or not, on its own.
func (p *Provisioner) bounded(ctx context.Context, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	_, err := mount.Bounded(ctx, func() (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}
