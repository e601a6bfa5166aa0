// Package emptydir implements emptyDir volumes: a fresh directory (mode
// 0777) that lives as long as its pod, on the node's disk or, with medium
// Memory, on a tmpfs sized by sizeLimit, the pod's memory limit and the
// node's allocatable memory.
//
// A disk emptyDir with a sizeLimit is, where the Limiter can make one, a
// directory whose file system enforces the limit (a btrfs subvolume with a
// qgroup limit); elsewhere a plain directory whose usage the agent watches
// (package usage).
//
// Teardown removes the directory and its data; it never follows a symlink
// and never crosses into a mount nested inside the volume.
package emptydir

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/downwardapi"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Name is the plugin's kubelet name.
const Name = "kubernetes.io/empty-dir"

// Plugin sets up emptyDir volumes.
type Plugin struct {
	Mounter mount.Mounter
	// NoSwap mounts the tmpfs of medium Memory with noswap (the kernel
	// supports it).
	NoSwap bool
	// Limiter, when set, makes a disk emptyDir with a sizeLimit a
	// directory whose file system enforces the limit, where it can (a
	// btrfs subvolume); elsewhere the volume is a plain directory whose
	// usage is watched against the limit.
	Limiter Limiter
}

var (
	_ volume.Plugin    = (*Plugin)(nil)
	_ volume.Validator = (*Plugin)(nil)
)

// Name implements volume.Plugin.
func (p *Plugin) Name() string { return Name }

// CanSupport implements volume.Plugin.
func (p *Plugin) CanSupport(v *v1.Volume) bool { return v.EmptyDir != nil }

// Validate rejects media the agent cannot provide.
func (p *Plugin) Validate(spec *volume.Spec) error {
	switch m := spec.Volume.EmptyDir.Medium; m {
	case v1.StorageMediumDefault, v1.StorageMediumMemory:
		return nil
	default:
		return fmt.Errorf("emptyDir medium %q is not supported (use \"\" or \"Memory\")", m)
	}
}

// SetUp creates the directory and, for medium Memory, mounts a tmpfs on it.
func (p *Plugin) SetUp(ctx context.Context, spec *volume.Spec, dir string) (res volume.Result, retErr error) {
	created, err := p.makeDir(ctx, spec, dir)
	if err != nil {
		return res, err
	}
	defer func() {
		if retErr != nil && created {
			undo, cancel := mount.RollbackContext(ctx)
			defer cancel()
			_ = p.TearDown(undo, dir)
		}
	}()
	memory := spec.Volume.EmptyDir.Medium == v1.StorageMediumMemory
	if !created {
		if err := p.checkMedium(ctx, dir, memory); err != nil {
			return res, err
		}
	}
	swap := volume.SwapUnknown
	if memory {
		m := mount.Tmpfs(p.NoSwap, tmpfsOptions(spec)...)
		mounted, err := mount.MountOn(ctx, p.Mounter, m, dir, created)
		if err != nil {
			return res, err
		}
		if mounted && mount.Privileged(p.Mounter) {
			swap = volume.SwapOf(p.NoSwap)
		}
	}
	if err := setPermissions(dir, p.fsGroup(spec.Pod)); err != nil {
		return res, err
	}
	return volume.Result{Path: dir, Swap: swap}, nil
}

// makeDir creates dir unless it exists, and reports whether it did. A disk
// emptyDir with a sizeLimit is made by the Limiter where it can; one that
// exists is never made anew (a restart keeps what is on disk: a plain
// directory stays one), and one the Limiter made gets its limit again.
func (p *Plugin) makeDir(ctx context.Context, spec *volume.Spec, dir string) (bool, error) {
	size := diskSizeLimit(spec)
	if p.Limiter == nil || size == 0 || !mount.Privileged(p.Mounter) {
		return mount.MakeDir(dir, 0o777)
	}
	exists, err := lexists(dir)
	if err != nil {
		return false, err
	}
	if exists {
		if _, err := p.Limiter.Limit(ctx, dir, size); err != nil {
			return false, fmt.Errorf("limit emptyDir %s to its sizeLimit: %w", dir, err)
		}
		return mount.MakeDir(dir, 0o777) // checks it is a directory
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o750); err != nil {
		return false, fmt.Errorf("create %s: %w", filepath.Dir(dir), err)
	}
	made, err := p.Limiter.Create(ctx, dir, size)
	if err != nil {
		if made {
			undo, cancel := mount.RollbackContext(ctx)
			defer cancel()
			_ = p.TearDown(undo, dir)
		}
		return false, fmt.Errorf("create emptyDir %s limited to its sizeLimit: %w", dir, err)
	}
	if made {
		return true, nil
	}
	return mount.MakeDir(dir, 0o777)
}

// diskSizeLimit is the sizeLimit in bytes of a disk emptyDir, 0 when it
// has none (or is a Memory one).
func diskSizeLimit(spec *volume.Spec) int64 {
	e := spec.Volume.EmptyDir
	if e.Medium != v1.StorageMediumDefault || e.SizeLimit == nil || e.SizeLimit.Sign() <= 0 {
		return 0
	}
	return e.SizeLimit.Value()
}

// lexists reports whether path exists, without following a symlink.
func lexists(path string) (bool, error) {
	_, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// checkMedium refuses to change the medium of an existing volume: a tmpfs
// mounted over an emptyDir that holds data on disk would hide the data (and
// its teardown would delete it unseen); a tmpfs where the spec now asks for
// disk would be silently kept. A running pod's volumes cannot change.
func (p *Plugin) checkMedium(ctx context.Context, dir string, memory bool) error {
	if !mount.Privileged(p.Mounter) {
		return nil // nothing is ever mounted: the medium cannot be told apart
	}
	mounted, err := p.Mounter.IsMountPoint(ctx, dir)
	if err != nil {
		return fmt.Errorf("check mount point %s: %w", dir, err)
	}
	switch {
	case mounted && !memory:
		return fmt.Errorf("emptyDir %s is a tmpfs but its medium is now disk: a running pod's volume cannot change medium (delete and recreate the pod)", dir)
	case !mounted && memory:
		full, err := mount.Bounded(ctx, func() (bool, error) { return hasEntries(dir) })
		if err != nil {
			return fmt.Errorf("read %s: %w", dir, err)
		}
		if full {
			return fmt.Errorf("emptyDir %s holds data on disk but its medium is now Memory: a tmpfs would hide it; a running pod's volume cannot change medium (delete and recreate the pod)", dir)
		}
	}
	return nil
}

// hasEntries reports whether dir holds anything.
func hasEntries(dir string) (bool, error) {
	f, err := os.Open(dir) //nolint:gosec // G304: the volume directory itself; its parent under --root-dir is root's, so a pod cannot swap it
	if err != nil {
		return false, err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	return len(names) > 0, nil
}

// TearDown unmounts the tmpfs, if any, and removes the directory: the
// Limiter removes what it made (a subvolume and its qgroup), whatever the
// spec now says.
//
// Whether the Limiter may have made dir is asked first, from cached
// attributes alone: a directory it did not make (every one on a file
// system it cannot limit) goes straight to RemoveDir, with its one scan
// for mounts.
func (p *Plugin) TearDown(ctx context.Context, dir string) error {
	if p.Limiter != nil && mount.Privileged(p.Mounter) && p.Limiter.MayHaveMade(dir) {
		// The Limiter deletes a whole tree at once: only one with no
		// mount at or below dir (whose data is not the volume's); such a
		// tree is left to RemoveDir, which unmounts dir and never
		// crosses into a mount nested inside.
		mounts, err := p.Mounter.MountsUnder(ctx, dir)
		if err == nil && len(mounts) == 0 {
			removed, err := p.Limiter.Remove(ctx, dir)
			if err != nil {
				return fmt.Errorf("remove emptyDir %s: %w", dir, err)
			}
			if removed {
				return nil
			}
		}
	}
	return mount.RemoveDir(ctx, p.Mounter, dir)
}

// setPermissions makes dir world-writable, as the kubelet does; with an
// fsGroup the group owns it and new files inherit the group (setgid).
func setPermissions(dir string, gid *int64) error {
	mode := os.FileMode(0o777)
	if gid != nil {
		if err := os.Lchown(dir, -1, int(*gid)); err != nil {
			return fmt.Errorf("set fsGroup on %s: %w", dir, err)
		}
		mode |= os.ModeSetgid
	}
	if err := os.Chmod(dir, mode); err != nil {
		return fmt.Errorf("set mode of %s: %w", dir, err)
	}
	return nil
}

// fsGroup is the pod's fsGroup, unless the agent may not change ownership.
func (p *Plugin) fsGroup(pod *v1.Pod) *int64 {
	if !mount.Privileged(p.Mounter) || pod == nil || pod.Spec.SecurityContext == nil {
		return nil
	}
	return pod.Spec.SecurityContext.FSGroup
}

// tmpfsOptions sizes the tmpfs as the kubelet does (its
// calculateEmptyDirMemorySize): the smallest of the node's allocatable
// memory, the pod's memory limit and sizeLimit, a zero one being ignored.
// The node's allocatable memory is its Node object's when the source knows
// it, else this machine's MemTotal: a Memory emptyDir is never left
// unbounded (the kernel's default, half of RAM, per tmpfs).
func tmpfsOptions(spec *volume.Spec) []string {
	opts := []string{"mode=0777"}
	var size *resource.Quantity
	for _, q := range []*resource.Quantity{nodeMemory(spec.Node), podMemoryLimit(spec.Pod), spec.Volume.EmptyDir.SizeLimit} {
		if q != nil && q.Sign() > 0 && (size == nil || q.Cmp(*size) < 0) {
			size = q
		}
	}
	if size != nil {
		opts = append(opts, fmt.Sprintf("size=%d", size.Value()))
	}
	return opts
}

// nodeMemory is the node's allocatable memory, nil when unknown.
func nodeMemory(node *v1.Node) *resource.Quantity {
	q, ok := downwardapi.Allocatable(node)[v1.ResourceMemory]
	if !ok {
		return nil
	}
	return &q
}

// podMemoryLimit is the pod's effective memory limit — the larger of the
// sum over its containers and the largest init container, plus the pod's
// overhead (its RuntimeClass's), as the kubelet sizes the pod's cgroup — or
// nil when a container has no limit.
func podMemoryLimit(pod *v1.Pod) *resource.Quantity {
	if pod == nil || len(pod.Spec.Containers) == 0 {
		return nil
	}
	sum := resource.Quantity{}
	for _, c := range pod.Spec.Containers {
		l, ok := c.Resources.Limits[v1.ResourceMemory]
		if !ok {
			return nil
		}
		sum.Add(l)
	}
	for _, c := range pod.Spec.InitContainers {
		if l, ok := c.Resources.Limits[v1.ResourceMemory]; ok && l.Cmp(sum) > 0 {
			sum = l
		}
	}
	if o, ok := pod.Spec.Overhead[v1.ResourceMemory]; ok {
		sum.Add(o)
	}
	return &sum
}
