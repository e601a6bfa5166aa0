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
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// A local PV of volumeMode Block is published as the kubelet publishes a
// block volume for a pod: at <root>/pods/<uid>/volumeDevices/kubernetes.io~local-volume/<pv>,
// which the runtime hands to the container as a device. The kubelet makes
// a symlink there to the device; the agent bind-mounts the device node
// onto an empty file it creates there instead, for two reasons: the host's
// /dev may be visible to the agent only below --host-root, where a symlink
// would name the wrong path on the host, and a mount is something the
// kernel shows (by mount ID) and a restart can verify. No global map path
// is needed: a local device is not attached or staged, and each pod's bind
// mount is all there is to count.
//
// The device node is opened (O_PATH) once, resolved inside the host root
// through directories only root can change (hostroot.OpenOwned), checked
// to be a block device, and bind-mounted from that descriptor, so
// the node swapped between the check and the mount is never the one
// published. The file it is mounted on is opened and created without
// following a symlink. Teardown unmounts it and removes the file the agent
// created: never the device node, never the device's data.

var _ volume.BlockMapper = (*Plugin)(nil)

// maxLayers bounds how many bind mounts stacked on one published file
// teardown takes off (the agent stacks none; one made by hand would).
const maxLayers = 8

// device is a PV's block device, open (O_PATH, or O_RDONLY for the loop
// device of a file, which was asked for its backing file), with its
// device number.
type device struct {
	fd   int
	rdev uint64
}

// MapDevice implements volume.BlockMapper: it publishes the PV's block
// device at path, a bind mount of the device node on a file the agent
// makes. A file at path that already shows the PV's device, as a mount of
// its own, is left as it is: a restart never publishes twice.
func (p *Plugin) MapDevice(ctx context.Context, spec *volume.Spec, path string) (volume.Result, error) {
	return p.mapDevice(ctx, spec, hostPath{spec.PV}, path)
}

// mapDevice is MapDevice of the PV's data st: a local PV's path, or a CSI
// PV's image (csi.go).
func (p *Plugin) mapDevice(ctx context.Context, spec *volume.Spec, st storage, path string) (volume.Result, error) {
	pv := spec.PV
	if !volume.Block(pv) {
		return volume.Result{}, fmt.Errorf("PersistentVolume %s has volumeMode Filesystem: it is mounted, not published as a device", pv.Name)
	}
	dev, err := mount.BoundedOpen(ctx, func() (device, error) { return p.openDevice(st) }, func(d device) { unix.Close(d.fd) })
	if err != nil {
		return volume.Result{}, fmt.Errorf("PersistentVolume %s: %w", pv.Name, err)
	}
	defer unix.Close(dev.fd)
	if err := p.publish(ctx, pv, st, dev, path); err != nil {
		return volume.Result{}, err
	}
	return volume.Result{Path: path}, nil
}

// openDevice opens st inside the host root and checks that it is a block
// device, or a file attached to a loop device (whose device it returns).
func (p *Plugin) openDevice(st storage) (device, error) {
	r, err := hostroot.Open(p.HostRoot)
	if err != nil {
		return device{}, err
	}
	defer r.Close()
	fd, err := st.open(r)
	if err != nil {
		return device{}, err
	}
	stat, err := statFd(fd)
	if err == nil && stat.Mode&unix.S_IFMT == unix.S_IFREG {
		unix.Close(fd)
		dev, err := loopOf(r, stat)
		if err != nil {
			return device{}, fmt.Errorf("%s: %w", st, err)
		}
		return dev, nil
	}
	if err == nil && stat.Mode&unix.S_IFMT != unix.S_IFBLK {
		err = fmt.Errorf("%s is not a block device, which a PersistentVolume of volumeMode Block needs", st)
	}
	if err != nil {
		unix.Close(fd)
		return device{}, err
	}
	return device{fd: fd, rdev: rdev(stat)}, nil
}

// loopOf finds, among the host's /dev/loop<N>, the loop device attached
// to the file st (by device and inode number, as the kernel reports it),
// and returns it open. It attaches nothing: the file's owner keeps it
// attached (the capacity backend attaches its images at every start).
func loopOf(r hostroot.Root, st unix.Statx_t) (device, error) {
	names, err := loopNames(r)
	if err != nil {
		return device{}, err
	}
	file := unix.Mkdev(st.Dev_major, st.Dev_minor)
	for _, name := range names {
		fd, err := r.OpenPath("/dev/"+name, unix.O_RDONLY|unix.O_NOFOLLOW)
		if err != nil {
			continue // gone meanwhile, or not a device we may open
		}
		info, err := unix.IoctlLoopGetStatus64(fd)
		if err == nil && info.Device == file && info.Inode == st.Ino {
			if dst, err := statFd(fd); err == nil && dst.Mode&unix.S_IFMT == unix.S_IFBLK {
				return device{fd: fd, rdev: rdev(dst)}, nil
			}
		}
		unix.Close(fd)
	}
	return device{}, errors.New("a file that no loop device is attached to (volumeMode Block needs a block device; the agent attaches the images it provisions at start)")
}

// loopNames lists the loop devices in the host's /dev: loop<N>.
func loopNames(r hostroot.Root) ([]string, error) {
	fd, err := r.OpenPath("/dev", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	dir := os.NewFile(uintptr(fd), "/dev")
	defer func() { _ = dir.Close() }()
	all, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list /dev: %w", err)
	}
	var out []string
	for _, n := range all {
		if num, ok := strings.CutPrefix(n, "loop"); ok && num != "" && strings.Trim(num, "0123456789") == "" {
			out = append(out, n)
		}
	}
	return out, nil
}

// publish bind-mounts dev, opened from st, on the file at path, creating it, unless it
// shows dev already. On error it takes off what it did.
func (p *Plugin) publish(ctx context.Context, pv *v1.PersistentVolume, st storage, dev device, path string) (retErr error) {
	parent, name := filepath.Dir(path), filepath.Base(path)
	if err := os.MkdirAll(parent, 0o750); err != nil {
		return fmt.Errorf("create %s: %w", parent, err)
	}
	pfd, err := openDir(parent)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	published, created, err := publishedAt(pfd, name, dev)
	if err != nil || published {
		return describe(pv, st, path, err)
	}
	mounted := false
	defer func() {
		if retErr != nil {
			undo, cancel := mount.RollbackContext(ctx)
			defer cancel()
			if mounted {
				_ = p.Mounter.Unmount(undo, path)
			}
			if created {
				_ = unix.Unlinkat(pfd, name, 0)
			}
		}
	}()
	target, err := openat2(pfd, name, unix.O_PATH|unix.O_NOFOLLOW, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		return describe(pv, st, path, err)
	}
	defer unix.Close(target)
	mounted = true
	m := mount.Mount{Type: "none", Source: fdPath(dev.fd), Options: []string{"bind"}}
	if err := p.Mounter.Mount(ctx, m, fdPath(target)); err != nil {
		return describe(pv, st, path, err)
	}
	if published, _, err = publishedAt(pfd, name, dev); err == nil && !published {
		err = errors.New("the bind mount does not show the device")
	}
	return describe(pv, st, path, err)
}

// describe names the PV, its device (st) and the published path in err.
func describe(pv *v1.PersistentVolume, st storage, path string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("PersistentVolume %s: publish its device %s at %s: %w", pv.Name, st.path(), path, err)
}

// publishedAt reports whether the entry name of the directory pfd is a
// mount of dev (published), and creates it as an empty file when it is
// missing (created). Anything else there is an error: it is left as it is.
func publishedAt(pfd int, name string, dev device) (published, created bool, err error) {
	fd, err := openat2(pfd, name, unix.O_PATH|unix.O_NOFOLLOW, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS)
	if errors.Is(err, unix.ENOENT) {
		return false, true, createEmpty(pfd, name)
	}
	if err != nil {
		return false, false, err
	}
	defer unix.Close(fd)
	st, mounted, err := statMounted(pfd, fd)
	switch {
	case err != nil:
		return false, false, err
	case mounted && st.Mode&unix.S_IFMT == unix.S_IFBLK && rdev(st) == dev.rdev:
		return true, false, nil
	case mounted && st.Mode&unix.S_IFMT == unix.S_IFBLK:
		return false, false, fmt.Errorf("it shows another device (%d:%d): leaving it", st.Rdev_major, st.Rdev_minor)
	case mounted || st.Mode&unix.S_IFMT != unix.S_IFREG:
		return false, false, errors.New("something the agent did not make is there: leaving it")
	}
	return false, false, nil
}

// createEmpty creates the empty file name in the directory pfd, never
// through a symlink.
func createEmpty(pfd int, name string) error {
	fd, err := unix.Openat(pfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "create", Path: name, Err: err}
	}
	return unix.Close(fd)
}

// UnmapDevice implements volume.BlockMapper: it unmounts the device
// published at path and removes the file it was mounted on. It removes
// nothing but an empty regular file: a device node, or anything else the
// agent did not make, stays, and the error says so. A missing path is
// not an error.
func (p *Plugin) UnmapDevice(ctx context.Context, path string) error {
	parent, name := filepath.Dir(path), filepath.Base(path)
	pfd, err := openDir(parent)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	for range maxLayers {
		st, mounted, err := statEntry(pfd, name)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unpublish device at %s: %w", path, err)
		}
		if !mounted {
			if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != 0 {
				return fmt.Errorf("unpublish device at %s: it is not the empty file the agent made: leaving it", path)
			}
			if err := unix.Unlinkat(pfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				return &os.PathError{Op: "unlink", Path: path, Err: err}
			}
			return nil
		}
		if err := p.Mounter.Unmount(ctx, path); err != nil {
			return err
		}
	}
	return fmt.Errorf("unpublish device at %s: more than %d mounts are stacked there: leaving them", path, maxLayers)
}

// statEntry stats the entry name of the directory pfd, never following a
// symlink, and reports whether it is a mount point.
func statEntry(pfd int, name string) (unix.Statx_t, bool, error) {
	fd, err := openat2(pfd, name, unix.O_PATH|unix.O_NOFOLLOW, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		return unix.Statx_t{}, false, err
	}
	defer unix.Close(fd)
	return statMounted(pfd, fd)
}

// statMounted stats fd, an entry of the directory pfd, and reports whether
// it is a mount point: its mount ID differs from its directory's.
func statMounted(pfd, fd int) (unix.Statx_t, bool, error) {
	dir, err := statFd(pfd)
	if err != nil {
		return dir, false, err
	}
	st, err := statFd(fd)
	if err != nil {
		return st, false, err
	}
	return st, st.Mnt_id != dir.Mnt_id, nil
}

// openDir opens dir as an O_PATH descriptor, refusing a symlink at its end.
func openDir(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return fd, nil
}

// fdPath names what fd refers to for mount(2), which follows the link to
// exactly that file.
func fdPath(fd int) string { return fmt.Sprintf("/proc/self/fd/%d", fd) }

func rdev(st unix.Statx_t) uint64 { return unix.Mkdev(st.Rdev_major, st.Rdev_minor) }
