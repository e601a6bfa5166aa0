package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
	"github.com/volume-agent/volume-agent/internal/provisioner/local"
)

// maxWalkEntries bounds the walk that measures a plain directory.
const maxWalkEntries = 1_000_000

// NodeGetInfo: the node ID is the node's name, its topology the hostname
// label the CSIStorageCapacity objects use.
func (d *Driver) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: d.cfg.NodeName, AccessibleTopology: d.topology()[0]}, nil
}

// NodeGetCapabilities: stats, volume health, and online
// expansion. No STAGE_UNSTAGE: publish binds the volume directly.
func (d *Driver) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	var caps []*csipb.NodeServiceCapability
	for _, t := range []csipb.NodeServiceCapability_RPC_Type{
		csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csipb.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
		csipb.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		caps = append(caps, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// checkTarget refuses a target path that is not absolute and clean.
func checkTarget(what, path string) error {
	if path == "" {
		return status.Errorf(codes.InvalidArgument, "%s is required", what)
	}
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return status.Errorf(codes.InvalidArgument, "%s %q: want an absolute, clean path", what, path)
	}
	return nil
}

// checkVolumePath refuses a volume path that is missing (InvalidArgument)
// or cannot be where the volume is published (NotFound).
func checkVolumePath(path string) error {
	if path == "" {
		return status.Error(codes.InvalidArgument, "volume path is required")
	}
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return status.Errorf(codes.NotFound, "volume path %q: no volume is published there (want an absolute, clean path)", path)
	}
	return nil
}

// NodePublishVolume binds the volume, opened and checked by descriptor,
// onto the target path: read-only when asked. A target that shows the
// volume already is done.
func (d *Driver) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	if err := checkID("volume", req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := checkTarget("target path", req.GetTargetPath()); err != nil {
		return nil, err
	}
	c := req.GetVolumeCapability()
	if c == nil {
		return nil, status.Error(codes.InvalidArgument, "NodePublishVolume: a volume capability is required")
	}
	r, err := d.known("NodePublishVolume", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if err := checkCap(c, r.Capacity != ""); err != nil {
		return nil, err
	}
	if (c.GetBlock() != nil) != r.Block {
		return nil, status.Errorf(codes.InvalidArgument, "NodePublishVolume %s: a raw block volume: %t, and the capability asks for %s", r.ID, r.Block, map[bool]string{true: "block", false: "mount"}[c.GetBlock() != nil])
	}
	if flags := c.GetMount().GetMountFlags(); len(flags) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "NodePublishVolume %s: mount options %v: a bind mount of the volume takes none; remove the class's mountOptions", r.ID, flags)
	}
	ro := req.GetReadonly() || c.GetAccessMode().GetMode() == csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
	unlock := d.locks.Lock(r.ID)
	defer unlock()
	if r.DeleteAt != nil {
		// A volume published again (a Retained PV reused) is not deleted.
		r.DeleteAt = nil
		if err := d.recs.put(r); err != nil {
			return nil, status.Errorf(codes.Internal, "NodePublishVolume %s: clear its pending deletion: %v", r.ID, err)
		}
		d.log.Info("pending deletion of a CSI volume cleared: it is published again", zap.String("volume", r.ID))
	}
	if c.GetAccessMode().GetMode() == csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER && !r.Block {
		if err := d.singleWriter(ctx, r, req.GetTargetPath()); err != nil {
			return nil, err
		}
	}
	_, err = mount.Bounded(ctx, func() (struct{}, error) { return struct{}{}, d.publish(r, req.GetTargetPath(), ro) })
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		return nil, status.Errorf(codes.Internal, "NodePublishVolume %s at %s: %v", r.ID, req.GetTargetPath(), err)
	}
	d.log.Info("CSI volume published", zap.String("volume", r.ID), zap.String("target", req.GetTargetPath()), zap.Bool("readOnly", ro))
	return &csipb.NodePublishVolumeResponse{}, nil
}

// singleWriter refuses to publish r (ReadWriteOncePod) at target while
// a mount elsewhere shows it.
func (d *Driver) singleWriter(ctx context.Context, r *record, target string) error {
	users, err := mount.MountsOf(ctx, d.cfg.Local.Path(r.ID))
	if err != nil {
		return status.Errorf(codes.Internal, "NodePublishVolume %s: find where it is published: %v", r.ID, err)
	}
	resolved := resolvePath(target)
	for _, u := range users {
		if u != target && u != resolved {
			return status.Errorf(codes.FailedPrecondition, "NodePublishVolume %s: access mode SINGLE_NODE_SINGLE_WRITER (ReadWriteOncePod), and it is published at %s already: "+
				"delete the pod that uses it first", r.ID, u)
		}
	}
	return nil
}

// resolvePath returns path with the symlinks of its longest existing
// prefix resolved, as the mount table shows a mount point: the kubelet's
// directory may be reached through a symlink (/var/lib/kubelet on
// another disk), and the target itself may not exist yet.
func resolvePath(path string) string {
	var rest []string
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(append([]string{r}, rest...)...)
		}
		if p == filepath.Dir(p) {
			return path
		}
		rest = append([]string{filepath.Base(p)}, rest...)
	}
}

// openVolume opens what the volume r shows, by descriptor, never
// following a symlink out of the root: its directory (the root of its
// image's file system) or, for a raw block volume, its loop device.
func (d *Driver) openVolume(r *record) (int, error) {
	if r.Block {
		return d.openLoop(r)
	}
	root, err := unix.Open(d.cfg.Local.Root(), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the local path root: %w", err)
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, r.ID, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS})
	if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		return -1, fmt.Errorf("open volume %s: %w: %s is not a directory directly under the local path root (a symlink?): refusing to follow it", r.ID, err, d.cfg.Local.Path(r.ID))
	}
	if err != nil {
		return -1, fmt.Errorf("open volume %s: %w", r.ID, err)
	}
	return fd, nil
}

// openLoop opens the loop device the image of the block volume r is
// attached to (the image backend attaches it at start).
func (d *Driver) openLoop(r *record) (int, error) {
	img := d.cfg.Local.Path(r.ID) + capacity.ImageSuffix
	links, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return -1, err
	}
	for _, l := range links {
		b, err := os.ReadFile(l) //nolint:gosec // G304: sysfs
		if err != nil || strings.TrimSpace(string(b)) != img {
			continue
		}
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(l)))
		fd, err := unix.Open(dev, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("open %s: %w", dev, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
			unix.Close(fd)
			return -1, fmt.Errorf("%s is not a block device", dev)
		}
		return fd, nil
	}
	return -1, fmt.Errorf("image %s of block volume %s is attached to no loop device: %w", img, r.ID, fs.ErrNotExist)
}

// fileID identifies what fd refers to, as mount.MountRoot identifies
// what a mount shows.
func fileID(fd int) (mount.FileID, error) {
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_INO, &st); err != nil {
		return mount.FileID{}, err
	}
	return mount.FileID{Dev: unix.Mkdev(st.Dev_major, st.Dev_minor), Ino: st.Ino}, nil
}

// publish binds r onto target (its ctx is NodePublishVolume's).
func (d *Driver) publish(r *record, target string, ro bool) error {
	src, err := d.openVolume(r)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOENT) {
			return status.Errorf(codes.NotFound, "NodePublishVolume %s: %v: the volume's storage is gone", r.ID, err)
		}
		return err
	}
	defer unix.Close(src)
	id, err := fileID(src)
	if err != nil {
		return err
	}
	if err := makeTarget(target, r.Block); err != nil {
		return err
	}
	shown, mounted, err := mount.MountRoot(context.Background(), target)
	if err != nil {
		return err
	}
	if mounted {
		if shown != id {
			return status.Errorf(codes.AlreadyExists, "NodePublishVolume %s: target %s has another mount: unpublish it first", r.ID, target)
		}
		if readOnly(target) != ro {
			return status.Errorf(codes.AlreadyExists, "NodePublishVolume %s: target %s shows the volume with read-only %t, asked for %t: unpublish it first", r.ID, target, !ro, ro)
		}
		return nil
	}
	parent, err := unix.Open(filepath.Dir(target), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the target's directory: %w", err)
	}
	defer unix.Close(parent)
	if err := mount.BindFD(src, parent, filepath.Base(target)); err != nil {
		return fmt.Errorf("bind the volume onto %s: %w", target, err)
	}
	if !ro {
		return nil
	}
	if err := remountReadOnly(target); err != nil {
		_ = unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
		return fmt.Errorf("make the bind mount on %s read-only: %w", target, err)
	}
	return nil
}

// makeTarget creates target: a directory, or an empty file for a raw
// block volume. One there already is kept.
func makeTarget(target string, block bool) error {
	if !block {
		if err := os.MkdirAll(target, 0o750); err != nil {
			return fmt.Errorf("create target %s: %w", target, err)
		}
		return nil
	}
	fd, err := unix.Open(target, unix.O_CREAT|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EISDIR) {
		return fmt.Errorf("target %s of a raw block volume is a directory", target)
	}
	if err != nil {
		return fmt.Errorf("create target %s: %w", target, err)
	}
	return unix.Close(fd)
}

// remountReadOnly makes the bind mount on target read-only, through the
// descriptor of the mount just made.
func remountReadOnly(target string) error {
	fd, err := unix.Open(target, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Mount("", "/proc/self/fd/"+strconv.Itoa(fd), "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, "")
}

// readOnly reports whether the mount on target is read-only.
func readOnly(target string) bool {
	var st unix.Statfs_t
	return unix.Statfs(target, &st) == nil && st.Flags&unix.ST_RDONLY != 0
}

// NodeUnpublishVolume unmounts the target path and removes it; a target
// that is not a mount, or gone, is done.
func (d *Driver) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	if err := checkID("volume", req.GetVolumeId()); err != nil {
		return nil, err
	}
	target := req.GetTargetPath()
	if err := checkTarget("target path", target); err != nil {
		return nil, err
	}
	unlock := d.locks.Lock(req.GetVolumeId())
	defer unlock()
	_, err := mount.Bounded(ctx, func() (struct{}, error) {
		for range 3 { // a target mounted more than once (a crash between retries)
			_, mounted, err := mount.MountRoot(ctx, target)
			if errors.Is(err, fs.ErrNotExist) {
				return struct{}{}, nil
			}
			if err != nil || !mounted {
				break
			}
			if err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW); err != nil {
				return struct{}{}, fmt.Errorf("unmount %s: %w", target, err)
			}
		}
		if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return struct{}{}, fmt.Errorf("remove target %s: %w", target, err)
		}
		return struct{}{}, nil
	})
	if err != nil {
		return nil, status.Errorf(codes.Internal, "NodeUnpublishVolume %s: %v", req.GetVolumeId(), err)
	}
	d.log.Info("CSI volume unpublished", zap.String("volume", req.GetVolumeId()), zap.String("target", target))
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// NodeGetVolumeStats reports the volume's own bytes and inodes: its
// qgroup, its image's file system, or a walk of a plain directory. A
// volume whose storage is gone is NotFound; its health (is the path
// showing it?) is NodeGetVolumeHealth's.
func (d *Driver) NodeGetVolumeStats(ctx context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	if err := checkID("volume", req.GetVolumeId()); err != nil {
		return nil, err
	}
	path := req.GetVolumePath()
	if err := checkVolumePath(path); err != nil {
		return nil, err
	}
	r, err := d.known("NodeGetVolumeStats", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, status.Errorf(codes.NotFound, "NodeGetVolumeStats %s: volume path %s does not exist", r.ID, path)
	}
	if c := d.condition(ctx, r, ""); c != nil {
		return nil, status.Errorf(codes.NotFound, "NodeGetVolumeStats %s: %s", r.ID, c.message)
	}
	usage, err := d.usage(ctx, r)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "NodeGetVolumeStats %s: %v", r.ID, err)
	}
	return &csipb.NodeGetVolumeStatsResponse{Usage: usage}, nil
}

// NodeGetVolumeHealth reports a volume whose storage is gone, or whose
// publish path (when given) does not show it, as INACCESSIBLE: the CSI
// spec 1.13 successor of VolumeCondition.
func (d *Driver) NodeGetVolumeHealth(ctx context.Context, req *csipb.NodeGetVolumeHealthRequest) (*csipb.NodeGetVolumeHealthResponse, error) {
	if err := checkID("volume", req.GetVolumeId()); err != nil {
		return nil, err
	}
	if p := req.GetVolumePublishPath(); p != "" {
		if err := checkTarget("volume publish path", p); err != nil {
			return nil, err
		}
	}
	r, err := d.known("NodeGetVolumeHealth", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	h := &csipb.VolumeHealth{VolumeId: r.ID}
	if c := d.condition(ctx, r, req.GetVolumePublishPath()); c != nil {
		h.HealthStatuses = []*csipb.VolumeHealth_VolumeHealthEntry{{Status: csipb.VolumeHealthErrorType_INACCESSIBLE, Reason: c.reason, Message: c.message}}
	}
	return &csipb.NodeGetVolumeHealthResponse{VolumeHealth: h}, nil
}

// abnormal is what is wrong with a volume.
type abnormal struct{ reason, message string }

// condition compares the volume r with what path (when not "") shows:
// nil when all is well.
func (d *Driver) condition(ctx context.Context, r *record, path string) *abnormal {
	src, err := mount.Bounded(ctx, func() (int, error) { return d.openVolume(r) })
	if err != nil {
		return &abnormal{"VolumeMissing", fmt.Sprintf("volume %s is gone from the local path root %s: %v", r.ID, d.cfg.Local.Root(), err)}
	}
	id, err := fileID(src)
	_ = unix.Close(src)
	if err != nil {
		return &abnormal{"VolumeUnreadable", fmt.Sprintf("volume %s: %v", r.ID, err)}
	}
	if path == "" {
		return nil
	}
	shown, mounted, err := mount.MountRoot(ctx, path)
	switch {
	case err != nil:
		return &abnormal{"PathUnreadable", fmt.Sprintf("volume path %s: %v", path, err)}
	case !mounted:
		return &abnormal{"NotMounted", fmt.Sprintf("volume path %s is not a mount: volume %s is not published there (unmounted behind the kubelet's back?)", path, r.ID)}
	case shown != id:
		return &abnormal{"MountReplaced", fmt.Sprintf("volume path %s shows another directory than volume %s: its mount was replaced", path, r.ID)}
	}
	return nil
}

// usage measures r: through its capacity backend, or by a bounded walk of
// a plain directory.
func (d *Driver) usage(ctx context.Context, r *record) ([]*csipb.VolumeUsage, error) {
	if r.Capacity == "" {
		return d.walkUsage(ctx, r)
	}
	u, err := d.cfg.Local.VolumeUsage(ctx, r.vol())
	if err != nil {
		return nil, err
	}
	out := []*csipb.VolumeUsage{{Unit: csipb.VolumeUsage_BYTES, Total: u.CapacityBytes, Used: u.UsedBytes, Available: u.AvailableBytes}}
	if u.Inodes > 0 {
		out = append(out, &csipb.VolumeUsage{Unit: csipb.VolumeUsage_INODES, Total: u.Inodes, Used: u.InodesUsed, Available: u.InodesFree})
	}
	return out, nil
}

// walkUsage counts the bytes (allocated blocks) and inodes of a plain
// directory, never leaving its file system nor following a symlink, and
// giving up past maxWalkEntries.
func (d *Driver) walkUsage(ctx context.Context, r *record) ([]*csipb.VolumeUsage, error) {
	type sum struct{ bytes, inodes int64 }
	s, err := mount.Bounded(ctx, func() (sum, error) {
		var s sum
		dir := d.cfg.Local.Path(r.ID)
		var top unix.Stat_t
		if err := unix.Lstat(dir, &top); err != nil {
			return s, err
		}
		err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fi, err := e.Info()
			if err != nil {
				return nil //nolint:nilerr // removed meanwhile
			}
			st, ok := fi.Sys().(*unix.Stat_t)
			if !ok || st.Dev != top.Dev {
				return fs.SkipDir
			}
			s.inodes++
			s.bytes += st.Blocks * 512
			if s.inodes > maxWalkEntries {
				return fmt.Errorf("more than %d files: not measured", maxWalkEntries)
			}
			return nil
		})
		return s, err
	})
	if err != nil {
		return nil, err
	}
	return []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Used: s.bytes},
		{Unit: csipb.VolumeUsage_INODES, Used: s.inodes},
	}, nil
}

// NodeExpandVolume grows the volume online through its capacity backend
// (the qgroup limit, or the image and its file system) and returns its
// size; a size it has already is done.
func (d *Driver) NodeExpandVolume(ctx context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	if err := checkID("volume", req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := checkVolumePath(req.GetVolumePath()); err != nil {
		return nil, err
	}
	r, err := d.known("NodeExpandVolume", req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(req.GetVolumePath()); errors.Is(err, fs.ErrNotExist) {
		return nil, status.Errorf(codes.NotFound, "NodeExpandVolume %s: volume path %s does not exist", r.ID, req.GetVolumePath())
	}
	want, err := size(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	unlock := d.locks.Lock(r.ID)
	defer unlock()
	if r, err = d.known("NodeExpandVolume", r.ID); err != nil {
		return nil, err
	}
	if r.Capacity == "" {
		return &csipb.NodeExpandVolumeResponse{CapacityBytes: want}, nil // nothing checks a plain directory's size
	}
	if want <= r.Size {
		return &csipb.NodeExpandVolumeResponse{CapacityBytes: r.Size}, nil
	}
	if err := d.cfg.Local.ExpandVolume(ctx, r.vol(), r.Size, want); err != nil {
		if errors.Is(err, local.ErrNoRoom) {
			return nil, status.Errorf(codes.ResourceExhausted, "NodeExpandVolume %s: %v", r.ID, err)
		}
		return nil, status.Errorf(codes.Internal, "NodeExpandVolume %s: %v", r.ID, err)
	}
	r.Size = want
	if err := d.recs.put(r); err != nil {
		return nil, status.Errorf(codes.Internal, "NodeExpandVolume %s: record its size: %v", r.ID, err)
	}
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: want}, nil
}
