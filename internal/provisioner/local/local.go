package local

import (
	"context"
	"errors"
	"fmt"

	"os"
	"path/filepath"

	"strconv"
	"strings"
	"sync"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Modes of the root and of each volume directory (see the package doc).
const (
	rootMode   = 0o700
	volumeMode = 0o777
)

// maxName is the longest volume name: NAME_MAX (255) less room for the
// capacity backends' ".img" and record files.
const maxName = 250

// maxPVName bounds the PV name, which is kept whole in the directory's
// name (pvc-<uid> is 40 bytes); the namespace and claim part is cut short
// instead.
const maxPVName = 128

// Config configures the local provisioner. Every field is required
// unless it says otherwise.
type Config struct {
	// Root is the directory volumes are made in (--local-path-root): an
	// absolute path without symlinks. New creates it when it is missing.
	Root string
	// NodeName is this node's name, also its kubernetes.io/hostname label.
	NodeName string
	// Mounter tells whether a volume has a mount below it, which Delete
	// refuses to remove.
	Mounter mount.Mounter
	Logger  *zap.Logger
	// Capacity makes the volumes of classes that enforce capacity
	// (ParamEnforce). Optional: when nil, such classes are refused, and
	// NoCapacity (optional too) says why in the refusal.
	Capacity   capacity.Backend
	NoCapacity error
	// OnChange, optional, is called after a volume was made, grown or
	// deleted: Room may have changed. It must not block.
	OnChange func()
}

// Provisioner provisions node-local volumes for the claims scheduled to
// this node.
type Provisioner struct {
	cfg Config
	log *zap.Logger
	// roomMu is held from the check that a volume of enforced capacity
	// fits (makeRoom) until it is made or grown.
	roomMu sync.Mutex
}

var _ provisioner.Provisioner = (*Provisioner)(nil)

// New checks cfg and creates the root (mode 0700, and its parents 0755)
// when it is missing. An existing root is given mode 0700 too.
func New(cfg Config) (*Provisioner, error) {
	switch {
	case !filepath.IsAbs(cfg.Root) || filepath.Clean(cfg.Root) != cfg.Root || cfg.Root == "/":
		return nil, fmt.Errorf("local provisioner: root %q: want an absolute, clean path other than /", cfg.Root)
	case cfg.NodeName == "":
		return nil, errors.New("local provisioner: node name is required")
	case cfg.Mounter == nil || cfg.Logger == nil:
		return nil, errors.New("local provisioner: a mounter and a logger are required")
	}
	if err := makeRoot(cfg.Root); err != nil {
		return nil, fmt.Errorf("local provisioner: %w", err)
	}
	return &Provisioner{cfg: cfg, log: cfg.Logger.Named("local-provisioner")}, nil
}

// makeRoot creates root with rootMode unless it exists, checks that it is
// a directory reached without symlinks, and gives it rootMode.
func makeRoot(root string) error {
	if err := os.MkdirAll(filepath.Dir(root), 0o755); err != nil { //nolint:gosec // G301: the root's parent (e.g. /var/lib) is a system directory; the root itself is made 0700 below
		return fmt.Errorf("create the parent of root %s: %w", root, err)
	}
	err := os.Mkdir(root, rootMode)
	if err == nil {
		err = os.Chmod(root, rootMode) // mkdir applied the umask
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create root %s: %w", root, err)
	}
	resolved, err := filepath.EvalSymlinks(root)
	if err != nil {
		return fmt.Errorf("root %s: %w", root, err)
	}
	if resolved != root {
		return fmt.Errorf("root %s: is or goes through a symlink (to %s): give the resolved path", root, resolved)
	}
	st, err := os.Stat(root)
	if err != nil || !st.IsDir() {
		return fmt.Errorf("root %s: not a directory", root)
	}
	if st.Mode().Perm() != rootMode {
		// A read-only root cannot be given its mode; nothing can be
		// provisioned there either (Provision asks for another node).
		if err := os.Chmod(root, rootMode); err != nil && !errors.Is(err, unix.EROFS) {
			return fmt.Errorf("root %s: make it reachable by root only: %w", root, err)
		}
	}
	return nil
}

// Name is provisioner.LocalName.
func (p *Provisioner) Name() string { return provisioner.LocalName }

// Provision makes the claim's volume under the root, or finds it, and
// describes a local PV pinned to this node: a plain directory, or, when
// the class enforces capacity, a volume of Capacity sized to the claim's
// request (empty, or a copy of req.Content). The file system is given
// until ctx ends; a retry after a deadline finds what the call made.
func (p *Provisioner) Provision(ctx context.Context, req provisioner.Request) (provisioner.Volume, error) {
	spec, err := p.check(req)
	if err != nil {
		return provisioner.Volume{}, err
	}
	c := req.Claim
	ann := map[string]string{provisioner.AnnArchiveOnDelete: strconv.FormatBool(spec.Archive)}
	if req.Tentative {
		kind := ""
		if spec.Enforce {
			kind = p.cfg.Capacity.Kind()
		}
		if err := p.record(req, spec.Name, kind); err != nil && rootFailure(err) {
			return provisioner.Volume{}, fmt.Errorf("provision claim %s/%s: %w: %w", c.Namespace, c.Name, provisioner.ErrReschedule, err)
		} else if err != nil {
			return provisioner.Volume{}, fmt.Errorf("provision claim %s/%s: %w", c.Namespace, c.Name, err)
		}
		spec.Marker = req.PVName
	}
	dir, err := p.createVolume(ctx, spec)
	if spec.Enforce {
		ann[AnnCapacity] = p.cfg.Capacity.Kind()
	}
	if errors.Is(err, ErrNoRoom) && req.Tentative {
		// Refused before anything was made: nothing to take back.
		if cerr := p.Commit(ctx, &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: req.PVName}}); cerr != nil {
			p.log.Info("record of a refused provisioning kept", zap.String("pv", req.PVName), zap.Error(cerr))
		}
	}
	if err != nil && (rootFailure(err) || errors.Is(err, ErrNoRoom)) {
		return provisioner.Volume{}, fmt.Errorf("provision claim %s/%s: %w: %w", c.Namespace, c.Name, provisioner.ErrReschedule, err)
	}
	if err != nil {
		return provisioner.Volume{}, fmt.Errorf("provision claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	p.changed()
	p.log.Info("provisioned local volume", zap.String("claim", c.Namespace+"/"+c.Name),
		zap.String("pv", req.PVName), zap.String("path", dir), zap.String("capacity", ann[AnnCapacity]))
	return provisioner.Volume{
		Source:       v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: dir}},
		NodeAffinity: nodeAffinity(p.cfg.NodeName),
		Annotations:  ann,
	}, nil
}

// check refuses a request this provisioner must not serve, and reads the
// class's parameters and the claim into the Spec of its volume.
func (p *Provisioner) check(req provisioner.Request) (Spec, error) {
	c := req.Claim
	if c == nil || req.Class == nil {
		return Spec{}, errors.New("provision: the request has no claim or no class")
	}
	key := c.Namespace + "/" + c.Name
	for field, v := range map[string]string{"metadata.namespace": c.Namespace, "metadata.name": c.Name, "PV name": req.PVName} {
		if v == "" || strings.ContainsAny(v, "/\x00") {
			return Spec{}, fmt.Errorf("provision claim %s: %s %q: want a non-empty name without \"/\"", key, field, v)
		}
	}
	if len(req.PVName) > maxPVName {
		return Spec{}, fmt.Errorf("provision claim %s: PV name %q: longer than %d bytes", key, req.PVName, maxPVName)
	}
	if req.SelectedNode != p.cfg.NodeName {
		return Spec{}, fmt.Errorf("provision claim %s: selected node %q is not this node %q", key, req.SelectedNode, p.cfg.NodeName)
	}
	params, err := ParseParams(req.Class.Name, req.Class.Parameters)
	if err != nil {
		return Spec{}, fmt.Errorf("provision claim %s: %w", key, err)
	}
	spec := Spec{Name: dirName(c.Namespace, c.Name, req.PVName), Params: params,
		Block: c.Spec.VolumeMode != nil && *c.Spec.VolumeMode == v1.PersistentVolumeBlock}
	if q, ok := c.Spec.Resources.Requests[v1.ResourceStorage]; ok {
		spec.Size = q.Value()
	}
	if spec.Content, spec.ContentSize, err = p.content(req.Content); err != nil {
		return Spec{}, fmt.Errorf("provision claim %s: %w", key, err)
	}
	if err := p.CheckSpec(req.Class.Name, spec); err != nil {
		return Spec{}, fmt.Errorf("provision claim %s: %w", key, err)
	}
	return spec, nil
}

// content is the capacity source of a request's Content, and the size the
// new volume needs at least to hold it.
func (p *Provisioner) content(c *provisioner.Content) (*capacity.Source, int64, error) {
	switch {
	case c == nil:
		return nil, 0, nil
	case (c.Volume == nil) == (c.Snapshot == ""):
		return nil, 0, errors.New("data source: want exactly one of a volume and a snapshot")
	case c.Snapshot != "":
		return &capacity.Source{Snapshot: c.Snapshot}, 0, nil
	}
	pv := c.Volume
	if !isEnforced(pv) {
		return nil, 0, fmt.Errorf("data source PV %s: %w", pv.Name, errPlainContent)
	}
	name, err := p.backendName(pv, "clone")
	if err != nil {
		return nil, 0, fmt.Errorf("data source: %w", err)
	}
	if volume.Block(pv) {
		return nil, 0, fmt.Errorf("data source PV %s: a raw block volume cannot be cloned (not supported)", pv.Name)
	}
	return &capacity.Source{Volume: name}, pv.Spec.Capacity.Storage().Value(), nil
}

// dirName is the directory of a volume: <namespace>-<claim>-<pvName>,
// with <namespace>-<claim> cut short when the whole would pass maxName.
func dirName(namespace, claim, pvName string) string {
	prefix, suffix := namespace+"-"+claim, "-"+pvName
	if len(prefix)+len(suffix) > maxName {
		prefix = prefix[:maxName-len(suffix)]
	}
	return prefix + suffix
}

// rootFailure reports whether err is a failure of the root itself, which
// another node may not have: it is missing, read-only, full or not
// writable.
func rootFailure(err error) bool {
	for _, errno := range []error{unix.ENOENT, unix.EACCES, unix.EROFS, unix.ENOSPC, unix.EDQUOT} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// nodeAffinity pins a PV to node.
func nodeAffinity(node string) *v1.VolumeNodeAffinity {
	return &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{
			Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{node},
		}},
	}}}}
}
