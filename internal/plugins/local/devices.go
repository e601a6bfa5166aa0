package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/keylock"
	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// defaultFSType is the file system of a local block device whose PV names
// none, as in the kubelet.
const defaultFSType = "ext4"

// Formatter mounts a block device with a file system, formatting it first
// only when it holds nothing (mount-utils' SafeFormatAndMount: never a
// device that holds a file system or a partition table).
type Formatter interface {
	FormatAndMount(device, target, fsType string, options []string) error
}

// Devices mounts the block devices of local PVs once per PV — the
// kubelet's global mount, at Dir/<pv> — for the pods' bind mounts to share.
// The global mount is taken down when the last pod's bind mount of it is
// gone, which is read from the pods' volume directories, never remembered:
// it holds across restarts. One lock per PV orders a pod's set-up (global
// mount, then its bind mount) against the teardown of the last other user.
type Devices struct {
	// Dir holds the global mounts: <root>/plugins/kubernetes.io/local-volume/mounts.
	Dir string
	// PodsDir is <root>/pods: bind mounts below it are the users.
	PodsDir   string
	Mounter   mount.Mounter
	Formatter Formatter

	locks keylock.Locks // by PV name
}

// lock takes the PV's lock and returns its release.
func (d *Devices) lock(pv string) func() { return d.locks.Lock(pv) }

// With mounts the PV's device once (when it is not mounted yet) and calls
// bind with the global mount, holding the PV's lock, so that the global
// mount cannot be taken down before bind has made its own mount of it.
func (d *Devices) With(ctx context.Context, pv *v1.PersistentVolume, device string, bind func(src string) error) error {
	unlock := d.lock(pv.Name)
	defer unlock()
	target := filepath.Join(d.Dir, pv.Name)
	if _, err := mount.MakeDir(target, 0o750); err != nil {
		return err
	}
	mounted, err := d.Mounter.IsMountPoint(ctx, target)
	if err != nil {
		return fmt.Errorf("check mount point %s: %w", target, err)
	}
	if !mounted {
		fsType := defaultFSType
		if t := pv.Spec.Local.FSType; t != nil {
			fsType = cmp.Or(*t, defaultFSType)
		}
		_, err := mount.Bounded(ctx, func() (struct{}, error) {
			return struct{}{}, d.Formatter.FormatAndMount(device, target, fsType, volume.MountOptions(pv))
		})
		if err != nil {
			return fmt.Errorf("PersistentVolume %s: mount device %s (%s) on %s: %w", pv.Name, device, fsType, target, err)
		}
	}
	return bind(target)
}

// Release takes the PV's global mount down when no pod's bind mount of it
// is left, and removes the empty mount point. A PV without a global mount
// (a directory) has nothing to release.
func (d *Devices) Release(ctx context.Context, pv string) error {
	unlock := d.lock(pv)
	defer unlock()
	target := filepath.Join(d.Dir, pv)
	users, err := d.users(ctx, target)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil || users > 0 {
		return err
	}
	return mount.RemoveMountPoint(ctx, d.Mounter, target)
}

// Sweep releases every global mount that no pod uses any more: a crash
// between a pod's teardown and the release leaves one behind.
func (d *Devices) Sweep(ctx context.Context) error {
	entries, err := os.ReadDir(d.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			errs = append(errs, d.Release(ctx, e.Name()))
		}
	}
	return errors.Join(errs...)
}

// users counts the pods whose volume directory of the PV —
// PodsDir/<uid>/volumes/kubernetes.io~local-volume/<pv>, where SetUp
// bind-mounts it — is a bind mount of the global mount at target. It
// returns os.ErrNotExist when target does not exist. Its cost is one statx
// per pod on the node, whatever the number of mounts: the mount table is
// not read.
func (d *Devices) users(ctx context.Context, target string) (int, error) {
	global, mounted, err := mount.MountRoot(ctx, target)
	if err != nil || !mounted {
		return 0, err // not mounted: an empty mount point, which release removes
	}
	pods, err := mount.Bounded(ctx, func() ([]os.DirEntry, error) { return os.ReadDir(d.PodsDir) })
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("list pods: %w", err)
	}
	n := 0
	for _, pod := range pods {
		dir := filepath.Join(d.PodsDir, pod.Name(), "volumes", layout.EscapePluginName(Name), filepath.Base(target))
		id, mounted, err := mount.MountRoot(ctx, dir)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return 0, fmt.Errorf("count users of %s: %w", target, err)
		case mounted && id == global:
			n++
		}
	}
	return n, nil
}
