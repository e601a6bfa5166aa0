// Package local implements local PersistentVolumes (spec.local): storage
// on this node — a directory, or a block device with a file system, or a
// raw block device (volumeMode Block) — that a claim binds a pod to. The
// PV's required node affinity must match this node. The PV's path is
// opened once, through directories only root can change, and used by its
// descriptor from then on (see open). A directory is bind-mounted into the
// pod's volume directory from that descriptor; a block device is mounted
// once per PV under <root>/plugins/kubernetes.io/local-volume/mounts/<pv>
// and bind-mounted into each pod that uses it; a raw block device is
// published for each pod that uses it (block.go).
//
// CSI PVs of the local provisioner's own driver (local.volume-agent.io)
// name a volume under --local-path-root instead of a host path; CSIPlugin
// (csi.go) sets them up through the same code, under the kubelet's CSI
// plugin name.
//
// Teardown unmounts and removes the empty mount point: nothing else, ever.
// The data lives on the node's storage and outlives every pod.
//
// A writable volume of a pod with an fsGroup is given to the group. The pod
// may change the volume while that runs, so the walk (setOwnership) never
// acts on a path: it must never follow a symlink, cross a mount, or change
// a file that has a hard link outside the volume (so it changes no file
// with more than one link).
package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/volume-agent/volume-agent/internal/hostroot"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Name is the plugin's kubelet name.
const Name = "kubernetes.io/local-volume"

// Plugin sets up local PersistentVolumes.
type Plugin struct {
	Mounter mount.Mounter
	// HostRoot is where the host's root file system is visible to the
	// agent; PV paths are host paths, resolved inside it.
	HostRoot string
	// NodeName is this node's name: its kubernetes.io/hostname label.
	NodeName string
	// Devices mounts block devices once per PV; nil refuses them.
	Devices *Devices
	// Logger reports the progress of long ownership changes; may be nil.
	Logger *zap.Logger
}

var (
	_ volume.Plugin    = (*Plugin)(nil)
	_ volume.PVPlugin  = (*Plugin)(nil)
	_ volume.Validator = (*Plugin)(nil)
	_ volume.Sweeper   = (*Plugin)(nil)
)

// Name implements volume.Plugin.
func (p *Plugin) Name() string { return Name }

// CanSupport implements volume.Plugin: local volumes come only from PVs.
func (p *Plugin) CanSupport(*v1.Volume) bool { return false }

// CanSupportPV implements volume.PVPlugin.
func (p *Plugin) CanSupportPV(pv *v1.PersistentVolume) bool { return pv.Spec.Local != nil }

// Validate checks the PV's path and that its node affinity names this node.
func (p *Plugin) Validate(spec *volume.Spec) error {
	pv := spec.PV
	if pv == nil {
		return errors.New("a local volume needs a PersistentVolume")
	}
	if lp := pv.Spec.Local.Path; !path.IsAbs(lp) || path.Clean(lp) != lp {
		return fmt.Errorf("PersistentVolume %s: spec.local.path %q must be a clean absolute path", pv.Name, lp)
	}
	return p.checkNode(pv, spec.Node)
}

// checkNode checks that pv's required node affinity matches this node,
// seen through n, its Node object when the source has one (may be nil).
func (p *Plugin) checkNode(pv *v1.PersistentVolume, n *v1.Node) error {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return fmt.Errorf("PersistentVolume %s: a local volume needs spec.nodeAffinity.required naming its node", pv.Name)
	}
	ok, err := corev1helpers.MatchNodeSelectorTerms(p.node(n), pv.Spec.NodeAffinity.Required)
	if err != nil {
		return fmt.Errorf("PersistentVolume %s: node affinity check failed: %w", pv.Name, err)
	}
	if !ok {
		return fmt.Errorf("PersistentVolume %s: node affinity check failed: its spec.nodeAffinity does not match node %s", pv.Name, p.NodeName)
	}
	return nil
}

// node is this node as the affinity check sees it: the Node object's
// labels when the source has one, and always kubernetes.io/hostname.
func (p *Plugin) node(n *v1.Node) *v1.Node {
	out := &v1.Node{}
	if n != nil {
		out = n.DeepCopy()
	}
	out.Name = p.NodeName
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	if _, ok := out.Labels[v1.LabelHostname]; !ok {
		out.Labels[v1.LabelHostname] = p.NodeName
	}
	return out
}

// SetUp bind-mounts the PV's directory, or its device's file system, into
// dir, read-only when asked, and gives the pod's fsGroup the volume when it
// is writable. The directory is mounted from the descriptor that was opened
// and checked (see open), never by its path again.
func (p *Plugin) SetUp(ctx context.Context, spec *volume.Spec, dir string) (volume.Result, error) {
	return p.setUp(ctx, spec, hostPath{spec.PV}, dir)
}

// setUp is SetUp of the PV's data st: a local PV's path, or a CSI PV's
// volume (csi.go).
func (p *Plugin) setUp(ctx context.Context, spec *volume.Spec, st storage, dir string) (volume.Result, error) {
	if volume.Block(spec.PV) {
		return volume.Result{}, fmt.Errorf("PersistentVolume %s has volumeMode Block: its device is published (MapDevice), not mounted", spec.PV.Name)
	}
	src, err := p.open(ctx, spec.PV, st)
	if err != nil {
		return volume.Result{}, err
	}
	defer unix.Close(src.fd)
	if testHookOpened != nil {
		testHookOpened()
	}
	if src.typ == unix.S_IFDIR {
		return p.bind(ctx, spec, st, src, dir, bindOptions(spec, volume.MountOptions(spec.PV)))
	}
	if p.Devices == nil {
		return volume.Result{}, fmt.Errorf("PersistentVolume %s: %s is a block device, and this agent does not mount devices", spec.PV.Name, st.path())
	}
	// mkfs and mount(8) take a path: the one the device was found at, every
	// directory of which only root can change (open checked them).
	device, err := os.Readlink(fdPath(src.fd))
	if err != nil {
		return volume.Result{}, fmt.Errorf("PersistentVolume %s: name the device opened at %s: %w", spec.PV.Name, st.path(), err)
	}
	var res volume.Result
	err = p.Devices.With(ctx, spec.PV, device, func(global string) error {
		g, err := openGlobal(global)
		if err != nil {
			return err
		}
		defer unix.Close(g.fd)
		// The global mount took the PV's options; the bind repeats those it
		// can apply (a file system option such as discard it cannot).
		res, err = p.bind(ctx, spec, st, g, dir, bindOptions(spec, mount.PerMountOptions(volume.MountOptions(spec.PV))))
		return err
	})
	return res, err
}

// testHookOpened, when set (by tests), is called between the opening of
// the PV's path and its mount.
var testHookOpened func()

// bind bind-mounts src, opened from st, into dir with opts.
func (p *Plugin) bind(ctx context.Context, spec *volume.Spec, st storage, src opened, dir string, opts []string) (res volume.Result, retErr error) {
	created, err := mount.MakeDir(dir, 0o750)
	if err != nil {
		return res, err
	}
	mounted := false
	defer func() {
		if retErr != nil {
			p.rollback(ctx, dir, created, mounted)
		}
	}()
	if mounted, err = p.mountFrom(ctx, spec.PV, st, src, dir, opts); err != nil {
		return res, err
	}
	if g := fsGroup(spec); g != nil && !spec.ReadOnly() && mount.Privileged(p.Mounter) {
		report := ownershipReporter(p.Logger, spec, *g)
		linked, err := mount.Bounded(ctx, func() (int, error) { return setOwnership(ctx, dir, *g, policy(spec.Pod), report) })
		if err != nil {
			return res, fmt.Errorf("give fsGroup %d the volume: %w", *g, err)
		}
		if linked > 0 && p.Logger != nil {
			p.Logger.Warn("fsGroup not given to files with more than one hard link", zap.String("pod", spec.Pod.Namespace+"/"+spec.Pod.Name),
				zap.String("volume", spec.Volume.Name), zap.Int64("fsGroup", *g), zap.Int("entries", linked))
		}
	}
	return volume.Result{Path: dir}, nil
}

// mountFrom bind-mounts what src (opened from st) refers to on dir, through the kernel's
// link to the opened file (/proc/self/fd), unless dir is a mount that
// shows it already (a restart never mounts twice); a mount on dir that
// shows anything else is taken off first. The new mount is checked to
// show src. It reports whether it mounted (a failed mount may have
// happened: the caller unmounts).
func (p *Plugin) mountFrom(ctx context.Context, pv *v1.PersistentVolume, st storage, src opened, dir string, opts []string) (bool, error) {
	id, mounted, err := mount.MountRoot(ctx, dir)
	switch {
	case err != nil:
		return false, fmt.Errorf("check mount point %s: %w", dir, err)
	case mounted && id == src.id:
		return false, nil
	case mounted:
		if err := p.Mounter.Unmount(ctx, dir); err != nil {
			return false, fmt.Errorf("PersistentVolume %s: the mount at %s shows another directory than %s, and taking it off failed: %w", pv.Name, dir, st, err)
		}
	}
	// The mount runs on with its own copy of the descriptor, closed when
	// the call returns: a call abandoned at ctx's end must never find the
	// descriptor's number given to another file.
	fd, err := unix.FcntlInt(uintptr(src.fd), unix.F_DUPFD_CLOEXEC, 0) //nolint:gosec // G115: a descriptor is non-negative
	if err != nil {
		return false, err
	}
	m := mount.Mount{Type: "none", Source: fdPath(fd), Options: opts}
	_, err = mount.Bounded(ctx, func() (struct{}, error) {
		defer unix.Close(fd)
		return struct{}{}, p.Mounter.Mount(context.WithoutCancel(ctx), m, dir)
	})
	if err != nil {
		return true, err
	}
	id, mounted, err = mount.MountRoot(ctx, dir)
	if err == nil && (!mounted || id != src.id) {
		err = fmt.Errorf("PersistentVolume %s: the mount at %s does not show the directory opened at %s", pv.Name, dir, st)
	}
	return true, err
}

// rollback undoes what a failed SetUp did; it never removes data.
func (p *Plugin) rollback(ctx context.Context, dir string, created, mounted bool) {
	undo, cancel := mount.RollbackContext(ctx)
	defer cancel()
	if mounted {
		_ = p.Mounter.Unmount(undo, dir)
	}
	if created {
		_ = mount.RemoveMountPoint(undo, p.Mounter, dir)
	}
}

// opened is a file the agent opened (O_PATH) and checked, to mount from.
type opened struct {
	fd  int
	typ uint32 // unix.S_IFMT bits
	id  mount.FileID
}

func openedOf(fd int) (opened, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return opened{}, err
	}
	return opened{fd: fd, typ: st.Mode & unix.S_IFMT, id: mount.FileID{Dev: st.Dev, Ino: st.Ino}}, nil
}

// storage is where a PV's data is: a local PV's spec.local.path on the
// host (hostPath), or a CSI PV's volume under the local path root
// (csiVolume). Only the opening differs: what is opened is checked, mounted
// from its descriptor, given the pod's fsGroup and published the same way.
type storage interface {
	// open opens the data (O_PATH): for a volume of volumeMode Filesystem
	// a directory or a block device, for one of volumeMode Block a block
	// device or an image file. r is the host root, open. An error says
	// what is wrong with the data and what to do; the caller names the PV.
	open(r hostroot.Root) (int, error)
	// path is the data's path, for messages.
	path() string
	// String names the field and the path, for messages.
	String() string
}

// hostPath is a local PV's spec.local.path.
type hostPath struct{ pv *v1.PersistentVolume }

func (h hostPath) path() string   { return h.pv.Spec.Local.Path }
func (h hostPath) String() string { return "spec.local.path " + h.path() }

// open opens the PV's host path inside the host root. Symlinks on the path
// are followed, once, as on the host (e.g. /mnt/disks -> /data), but only
// where no user other than root can change them or the directories
// holding them (hostroot.OpenOwned): such a user could otherwise point
// the path anywhere, before a check as well as after it.
func (h hostPath) open(r hostroot.Root) (int, error) {
	fd, err := r.OpenOwned(h.path())
	switch {
	case errors.Is(err, os.ErrNotExist):
		return -1, fmt.Errorf("spec.local.path %s does not exist on this node", h.path())
	case errors.Is(err, hostroot.ErrNotOwned):
		return -1, fmt.Errorf("spec.local.path is refused: %w; make each directory on the path, and each holding a symlink on it, "+
			"root's and writable only by root (chown root, chmod go-w), or move the volume", err)
	}
	return fd, err
}

// open opens st, pv's data, a directory or a block device, with the host
// root open for it.
func (p *Plugin) open(ctx context.Context, pv *v1.PersistentVolume, st storage) (opened, error) {
	src, err := mount.BoundedOpen(ctx, func() (opened, error) {
		r, err := hostroot.Open(p.HostRoot)
		if err != nil {
			return opened{}, err
		}
		defer r.Close()
		fd, err := st.open(r)
		if err != nil {
			return opened{}, err
		}
		o, err := openedOf(fd)
		if err != nil {
			unix.Close(fd)
		}
		return o, err
	}, func(o opened) { unix.Close(o.fd) })
	switch {
	case err != nil:
		return opened{}, fmt.Errorf("PersistentVolume %s: %w", pv.Name, err)
	case src.typ != unix.S_IFDIR && src.typ != unix.S_IFBLK:
		unix.Close(src.fd)
		return opened{}, fmt.Errorf("PersistentVolume %s: %s is neither a directory nor a block device", pv.Name, st)
	}
	return src, nil
}

// openGlobal opens the global mount of a device, the agent's own
// directory, to bind-mount from.
func openGlobal(global string) (opened, error) {
	fd, err := openDir(global)
	if err != nil {
		return opened{}, err
	}
	o, err := openedOf(fd)
	if err != nil {
		unix.Close(fd)
		return opened{}, fmt.Errorf("stat %s: %w", global, err)
	}
	return o, nil
}

// bindOptions are the bind mount's options: pvOpts, then ro when the
// claim volume asks, last so that a PV's rw cannot undo it (the last of ro
// and rw wins; volume.Spec.MountsReadOnly). An option a bind mount cannot
// apply fails the mount rather than being dropped.
func bindOptions(spec *volume.Spec, pvOpts []string) []string {
	opts := append([]string{"bind"}, pvOpts...)
	if spec.ReadOnly() {
		opts = append(opts, "ro")
	}
	return opts
}

func fsGroup(spec *volume.Spec) *int64 {
	if spec.Pod == nil || spec.Pod.Spec.SecurityContext == nil {
		return nil
	}
	return spec.Pod.Spec.SecurityContext.FSGroup
}

func policy(pod *v1.Pod) v1.PodFSGroupChangePolicy {
	if sc := pod.Spec.SecurityContext; sc != nil && sc.FSGroupChangePolicy != nil {
		return *sc.FSGroupChangePolicy
	}
	return v1.FSGroupChangeAlways
}

// TearDown unmounts dir and removes the empty mount point. It never
// removes anything else: what is left in dir after the unmount is data,
// and stays.
// A block device's global mount is taken down with its last user.
func (p *Plugin) TearDown(ctx context.Context, dir string) error {
	if err := mount.RemoveMountPoint(ctx, p.Mounter, dir); err != nil {
		return err
	}
	if p.Devices == nil {
		return nil
	}
	return p.Devices.Release(ctx, filepath.Base(dir)) // the directory is named after the PV
}

// Sweep implements volume.Sweeper: it takes down the global mounts no pod
// uses any more.
func (p *Plugin) Sweep(ctx context.Context) error {
	if p.Devices == nil {
		return nil
	}
	return p.Devices.Sweep(ctx)
}
