package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/hostroot"
	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// A CSI PersistentVolume of the agent's own driver (spec.csi.driver
// local.volume-agent.io) names a volume the local provisioner made by its
// name directly under --local-path-root (spec.csi.volumeHandle): the
// directory <root>/<handle>, or for volumeMode Block the image
// <root>/<handle>.img. A stock kubelet publishes it through the agent's CSI
// node service; the agent's own volume manager sets it up here, exactly as
// the local PV the local provisioner would have made for the volume (same
// node affinity check, bind mount from a checked descriptor, read-only,
// fsGroup, published loop device, teardown), under the kubelet's CSI
// plugin name. The handle is checked to be one plain name before anything
// is opened, and opened beneath the root without following any symlink:
// a PV can name a volume of the root, nothing else. CSI PVs of any other
// driver, and inline CSI volumes, stay unsupported.

// CSIName is the kubelet's name of its CSI plugin, under which the agent
// sets up the CSI PVs of its own driver: their volume directories are
// <root>/pods/<uid>/volumes/kubernetes.io~csi/<pv>.
const CSIName = "kubernetes.io/csi"

// Driver is the CSI driver whose PVs the agent sets up itself: the local
// provisioner's.
const Driver = provisioner.LocalName

// CSIPlugin sets up the CSI PersistentVolumes of Driver.
type CSIPlugin struct {
	// Local is the local PV plugin that sets the volumes up: its mounter,
	// node name, host root (for the host's loop devices) and logger serve
	// both.
	Local *Plugin
	// Root is the local path root the agent was started with
	// (--local-path-root, resolved), which holds the volumes; "" when the
	// local provisioner is off: every such volume is then refused.
	Root string
}

var (
	_ volume.Plugin      = (*CSIPlugin)(nil)
	_ volume.PVPlugin    = (*CSIPlugin)(nil)
	_ volume.Validator   = (*CSIPlugin)(nil)
	_ volume.BlockMapper = (*CSIPlugin)(nil)
)

// Name implements volume.Plugin.
func (c *CSIPlugin) Name() string { return CSIName }

// CanSupport implements volume.Plugin: an inline CSI volume is not a
// volume of the local path root.
func (c *CSIPlugin) CanSupport(*v1.Volume) bool { return false }

// CanSupportPV implements volume.PVPlugin: the CSI PVs of Driver only.
func (c *CSIPlugin) CanSupportPV(pv *v1.PersistentVolume) bool {
	return pv.Spec.CSI != nil && pv.Spec.CSI.Driver == Driver
}

// Validate checks, without any I/O, that the PV is of Driver, that its
// handle is a plain name, that its node affinity names this node and that
// the agent has the local path root.
func (c *CSIPlugin) Validate(spec *volume.Spec) error {
	pv := spec.PV
	if pv == nil || pv.Spec.CSI == nil {
		return fmt.Errorf("a volume of the CSI driver %s needs a PersistentVolume with spec.csi", Driver)
	}
	if d := pv.Spec.CSI.Driver; d != Driver {
		return fmt.Errorf("PersistentVolume %s: spec.csi.driver %q: volume-agent sets up the volumes of its own driver %s only", pv.Name, d, Driver)
	}
	if err := checkHandle(pv.Spec.CSI.VolumeHandle); err != nil {
		return fmt.Errorf("PersistentVolume %s: spec.csi.volumeHandle %w; a volume of %s is named by its directory directly under --local-path-root", pv.Name, err, Driver)
	}
	if err := c.Local.checkNode(pv, spec.Node); err != nil {
		return err
	}
	if c.Root == "" {
		return fmt.Errorf("PersistentVolume %s: its volume %s is under the local provisioner's --local-path-root, and this agent runs without the local provisioner: "+
			"start it with --provisioners local and --local-path-root set to the directory that holds the volume", pv.Name, pv.Spec.CSI.VolumeHandle)
	}
	return nil
}

// checkHandle checks that h can name a volume directly under the local
// path root: one path element (layout.ValidName), and not hidden, as the
// provisioner's records and the volumes it moved aside to be deleted are.
func checkHandle(h string) error {
	if err := layout.ValidName(h); err != nil {
		return err
	}
	if strings.HasPrefix(h, ".") {
		return fmt.Errorf("%q starts with a dot: such names under the local path root are the provisioner's records and volumes moved aside, not volumes", h)
	}
	return nil
}

// SetUp implements volume.Plugin: it checks the spec again (Validate) and
// sets the volume's directory up as the local plugin does a local PV's.
func (c *CSIPlugin) SetUp(ctx context.Context, spec *volume.Spec, dir string) (volume.Result, error) {
	st, err := c.storage(spec)
	if err != nil {
		return volume.Result{}, err
	}
	return c.Local.setUp(ctx, spec, st, dir)
}

// TearDown implements volume.Plugin: it unmounts dir and removes the empty
// mount point, as the local plugin does; the volume's data stays.
func (c *CSIPlugin) TearDown(ctx context.Context, dir string) error {
	return mount.RemoveMountPoint(ctx, c.Local.Mounter, dir)
}

// MapDevice implements volume.BlockMapper: it publishes the loop device of
// the volume's image at path, as the local plugin does a local PV's.
func (c *CSIPlugin) MapDevice(ctx context.Context, spec *volume.Spec, path string) (volume.Result, error) {
	st, err := c.storage(spec)
	if err != nil {
		return volume.Result{}, err
	}
	return c.Local.mapDevice(ctx, spec, st, path)
}

// UnmapDevice implements volume.BlockMapper, as the local plugin does.
func (c *CSIPlugin) UnmapDevice(ctx context.Context, path string) error {
	return c.Local.UnmapDevice(ctx, path)
}

// storage is the volume spec's PV names, once the spec is checked.
func (c *CSIPlugin) storage(spec *volume.Spec) (csiVolume, error) {
	if err := c.Validate(spec); err != nil {
		return csiVolume{}, err
	}
	return csiVolume{root: c.Root, handle: spec.PV.Spec.CSI.VolumeHandle, block: volume.Block(spec.PV)}, nil
}

// csiVolume is a CSI PV's volume under the local path root: the directory
// handle, or the image handle.img of a volume of volumeMode Block.
type csiVolume struct {
	root, handle string
	block        bool
}

func (v csiVolume) name() string {
	if v.block {
		return v.handle + capacity.ImageSuffix
	}
	return v.handle
}

func (v csiVolume) path() string { return filepath.Join(v.root, v.name()) }

func (v csiVolume) String() string {
	return fmt.Sprintf("spec.csi.volumeHandle %s (%s)", v.handle, v.path())
}

// open opens the volume beneath the root, never through a symlink
// (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), and checks that it is a
// directory (an image for volumeMode Block). The root is the agent's own
// directory, made 0700 and resolved at start; the host root is not needed.
func (v csiVolume) open(hostroot.Root) (int, error) {
	root, err := unix.Open(v.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the local path root: %w", &os.PathError{Op: "open", Path: v.root, Err: err})
	}
	defer unix.Close(root)
	// Without O_NOFOLLOW a symlink as the last name fails (ELOOP) rather
	// than being opened itself.
	fd, err := openat2(root, v.name(), unix.O_PATH, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS)
	switch {
	case errors.Is(err, unix.ENOENT):
		return -1, fmt.Errorf("spec.csi.volumeHandle %s: %s does not exist on this node: the volume was deleted, or the PV names another node's volume", v.handle, v.path())
	case errors.Is(err, unix.ELOOP):
		return -1, fmt.Errorf("spec.csi.volumeHandle %s: %s is a symlink, refused: a volume is what the local provisioner made there, never a link", v.handle, v.path())
	case err != nil:
		return -1, fmt.Errorf("spec.csi.volumeHandle %s: open %s: %w", v.handle, v.path(), err)
	}
	if err := v.check(fd); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// check checks that fd, the volume opened, is a directory, or for
// volumeMode Block a regular file (its image).
func (v csiVolume) check(fd int) error {
	st, err := statFd(fd)
	if err != nil {
		return fmt.Errorf("spec.csi.volumeHandle %s: stat %s: %w", v.handle, v.path(), err)
	}
	typ := st.Mode & unix.S_IFMT
	switch {
	case v.block && typ != unix.S_IFREG:
		return fmt.Errorf("spec.csi.volumeHandle %s: %s is not the image of a raw block volume (volumeMode Block)", v.handle, v.path())
	case !v.block && typ != unix.S_IFDIR:
		return fmt.Errorf("spec.csi.volumeHandle %s: %s is not a directory, which a volume of volumeMode Filesystem is", v.handle, v.path())
	}
	return nil
}
