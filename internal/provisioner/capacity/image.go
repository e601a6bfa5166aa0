package capacity

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner/storagedir"
)

// ImageSuffix ends the name of an image: <root>/<name>.img.
const ImageSuffix = ".img"

// imageKind names the image backend.
const imageKind = "image"

// errNeedSysResource: the kernel grows a mounted ext4 only for a process
// with CAP_SYS_RESOURCE.
var errNeedSysResource = errors.New("growing a mounted ext4 file system needs the capability CAP_SYS_RESOURCE, which the agent lacks; the expansion is finished when the volume is next found unmounted")

// imageDriver makes each volume a sparse ext4 image <root>/<name>.img on a
// loop device, mounted on <root>/<name>. Every path given to a tool is
// absolute, so none is read as an option.
type imageDriver struct {
	root    string
	mode    os.FileMode
	run     runner
	mounter mount.Mounter
	log     *zap.Logger
}

var _ driver = (*imageDriver)(nil)

func newImage(cfg Config) *imageDriver {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &imageDriver{root: cfg.Root, mode: cfg.VolumeMode, run: runner{timeout: cfg.Timeout}, mounter: cfg.Mounter,
		log: cfg.Logger.Named("capacity").With(zap.String("backend", imageKind))}
}

func (d *imageDriver) kind() string { return imageKind }

func (d *imageDriver) img(v *record) string { return filepath.Join(d.root, v.Name+ImageSuffix) }

func (d *imageDriver) dir(v *record) string { return filepath.Join(d.root, v.Name) }

func (d *imageDriver) exists(v *record) (bool, error) {
	img, err := lexists(d.img(v))
	if err != nil || img {
		return img, err
	}
	return lexists(d.dir(v))
}

// create sizes the image, gives it a file system unless it has one,
// attaches and mounts it, and grows it until the file system holds the
// volume's size (fit). A raw block volume's image is its size, and is
// only attached.
func (d *imageDriver) create(ctx context.Context, v *record, _ func() error) error {
	if v.Block {
		if err := growFile(d.img(v), v.Size); err != nil {
			return err
		}
		return d.attach(ctx, v)
	}
	if err := growFile(d.img(v), imageSize(v.Size, 0)); err != nil {
		return err
	}
	if err := d.format(ctx, v); err != nil {
		return err
	}
	if err := d.attach(ctx, v); err != nil {
		return err
	}
	dev, err := d.loop(ctx, d.img(v))
	if err != nil {
		return err
	}
	if err := d.fit(ctx, v, dev, true); err != nil { // nothing has its path yet
		return err
	}
	return os.Chmod(d.dir(v), d.mode) // the root of the new file system
}

// format makes an ext4 file system on the image when blkid finds no
// signature at all on it; an image that has one is never formatted again.
func (d *imageDriver) format(ctx context.Context, v *record) error {
	img := d.img(v)
	out, err := d.run.run(ctx, "blkid", "-p", "-o", "value", "-s", "TYPE", img)
	var te *toolError
	switch {
	case errors.As(err, &te) && te.code == 2: // nothing found
	case err != nil:
		return err
	case strings.TrimSpace(out) == "ext4":
		return nil
	default:
		return fmt.Errorf("image %s holds %q, not ext4; leaving it", img, strings.TrimSpace(out))
	}
	// paramsFor: no blocks reserved for root, a journal proportionate to
	// the volume; lazy init and nodiscard: formatting writes little to a
	// sparse file.
	args := append([]string{"-F", "-q"}, paramsFor(v.Size).args()...)
	args = append(args, "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=0:0", img)
	_, err = d.run.run(ctx, "mkfs.ext4", args...)
	return err
}

// attach finds the image's loop device or attaches one, and mounts it on
// the volume's directory unless it is mounted there (a raw block volume:
// never).
func (d *imageDriver) attach(ctx context.Context, v *record) error {
	dev, err := d.loop(ctx, d.img(v))
	if err != nil || v.Block {
		return err // a raw block volume is its loop device
	}
	dir := d.dir(v)
	if _, err := mount.MakeDir(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	mounted, err := d.mounter.IsMountPoint(ctx, dir)
	if err != nil {
		return err
	}
	if mounted {
		return sameDevice(dir, dev)
	}
	return d.mounter.Mount(ctx, mount.Mount{Type: "ext4", Source: dev}, dir)
}

// sameDevice checks that dir is the root of the file system on dev.
func sameDevice(dir, dev string) error {
	var m, b unix.Stat_t
	if err := unix.Lstat(dir, &m); err != nil {
		return &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	if err := unix.Stat(dev, &b); err != nil {
		return &os.PathError{Op: "stat", Path: dev, Err: err}
	}
	if m.Dev != b.Rdev {
		return fmt.Errorf("%s is a mount point of another device than %s", dir, dev)
	}
	return nil
}

// loop returns the loop device of img, attaching one when there is none:
// with direct I/O (no second copy in the page cache), or without it where
// the kernel or the root's file system refuses.
func (d *imageDriver) loop(ctx context.Context, img string) (string, error) {
	devs, err := d.loops(ctx, img)
	if err != nil || len(devs) > 0 {
		return first(devs), err
	}
	out, err := d.run.run(ctx, "losetup", "--find", "--show", "--direct-io=on", img)
	if err != nil {
		// Direct I/O refused. Some losetup versions attach the device
		// before they fail to switch it on: use that one, never a second.
		if devs, lerr := d.loops(ctx, img); lerr != nil || len(devs) > 0 {
			return first(devs), lerr
		}
		out, err = d.run.run(ctx, "losetup", "--find", "--show", img)
	}
	if err != nil {
		return "", err
	}
	dev := strings.TrimSpace(out)
	if !strings.HasPrefix(dev, "/dev/loop") {
		return "", fmt.Errorf("losetup attached %s as %q, not a loop device", img, dev)
	}
	return dev, nil
}

// loops lists the loop devices backed by img.
func (d *imageDriver) loops(ctx context.Context, img string) ([]string, error) {
	out, err := d.run.run(ctx, "losetup", "--associated", img, "--noheadings", "--output", "NAME")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// expand grows the image and tells the loop device its new size, then
// grows ext4: online when the volume is mounted (no remount: files open
// in it stay usable), else checked and grown offline before it is
// mounted again (after a node restart); then, as at creation, until it
// holds the volume's size (fit).
func (d *imageDriver) expand(ctx context.Context, v *record) error {
	mounted, err := d.mounter.IsMountPoint(ctx, d.dir(v))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	size := v.Size
	if !v.Block {
		size, err = d.expandedSize(ctx, v, mounted)
		if err != nil {
			return err
		}
	}
	if err := growFile(d.img(v), size); err != nil {
		return err
	}
	dev, err := d.loop(ctx, d.img(v))
	if err != nil {
		return err
	}
	if _, err := d.run.run(ctx, "losetup", "--set-capacity", dev); err != nil || v.Block {
		return err // a raw block volume has no file system to grow
	}
	if mounted {
		if err := d.growOnline(ctx, d.dir(v), dev); err != nil {
			return err
		}
	} else if err := d.growOffline(ctx, v, dev); err != nil {
		return err
	}
	return d.fit(ctx, v, dev, !mounted) // unmounted: being recovered, no pod has it
}

// expandedSize estimates the image of v grown to v.Size, by the block
// size of its file system when it is mounted; an image never shrinks.
func (d *imageDriver) expandedSize(ctx context.Context, v *record, mounted bool) (int64, error) {
	var bs int64
	if mounted {
		st, err := mount.Bounded(ctx, func() (unix.Statfs_t, error) {
			var st unix.Statfs_t
			err := unix.Statfs(d.dir(v), &st)
			return st, err
		})
		if err != nil {
			return 0, &os.PathError{Op: "statfs", Path: d.dir(v), Err: err}
		}
		bs = st.Bsize
	}
	have, err := fileSize(d.img(v))
	if err != nil {
		return 0, err
	}
	return max(have, imageSize(v.Size, bs)), nil
}

func (d *imageDriver) growOnline(ctx context.Context, dir, dev string) error {
	if err := sameDevice(dir, dev); err != nil {
		return err
	}
	_, err := d.run.run(ctx, "resize2fs", dev)
	var te *toolError
	if errors.As(err, &te) && strings.Contains(te.stderr, "Permission denied") {
		return fmt.Errorf("%w: %w", errNeedSysResource, err)
	}
	return err
}

// check runs e2fsck in preen mode, which resize2fs wants before it grows
// an unmounted file system; exit status 1 means it fixed something.
func (d *imageDriver) check(ctx context.Context, dev string) error {
	_, err := d.run.run(ctx, "e2fsck", "-f", "-p", dev)
	var te *toolError
	if errors.As(err, &te) && te.code == 1 {
		return nil
	}
	return err
}

// usage is statfs of the mounted file system (never of the root below an
// unmounted volume); of a raw block volume, its size and its image's
// allocated blocks.
func (d *imageDriver) usage(ctx context.Context, v *record) (Usage, error) {
	if v.Block {
		// No file system the agent knows: the device's size, and what the
		// sparse image has allocated of it.
		used, err := d.taken(ctx, v)
		return Usage{CapacityBytes: v.Size, UsedBytes: used, AvailableBytes: max(0, v.Size-used)}, err
	}
	dir := d.dir(v)
	mounted, err := d.mounter.IsMountPoint(ctx, dir)
	if err != nil {
		return Usage{}, err
	}
	if !mounted {
		return Usage{}, fmt.Errorf("image volume %s is not mounted", v.Name)
	}
	return mount.Bounded(ctx, func() (Usage, error) { return statfsUsage(dir) })
}

// taken is what the image file has allocated: it is sparse, and grows as
// the volume's file system writes to new blocks. A reflinked copy counts
// as taking nothing yet.
func (d *imageDriver) taken(_ context.Context, v *record) (int64, error) {
	if v.Reflinked {
		// It shares its extents with its source's image until either
		// is written: it may take all of its image.
		return 0, nil
	}
	var st unix.Stat_t
	if err := unix.Lstat(d.img(v), &st); err != nil {
		return 0, &os.PathError{Op: "lstat", Path: d.img(v), Err: err}
	}
	return st.Blocks * 512, nil
}

// footprint is the image's size, or for a volume whose image is not made
// or not grown yet the estimate of it (imageSize); a raw block volume's
// image is its size.
func (d *imageDriver) footprint(v *record) (int64, error) {
	if v.Block {
		return v.Size, nil
	}
	want := imageSize(v.Size, 0)
	if v.Name == "" {
		return want, nil // a volume to be made
	}
	have, err := fileSize(d.img(v))
	if errors.Is(err, fs.ErrNotExist) {
		return want, nil
	}
	return max(have, want), err
}

func statfsUsage(dir string) (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return Usage{}, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	bs := st.Bsize
	return Usage{
		CapacityBytes:  int64(st.Blocks) * bs,          //nolint:gosec // G115: block counts of a volume fit in int64
		UsedBytes:      int64(st.Blocks-st.Bfree) * bs, //nolint:gosec // G115: as above
		AvailableBytes: int64(st.Bavail) * bs,          //nolint:gosec // G115: as above
		Inodes:         int64(st.Files),                //nolint:gosec // G115: inode counts fit in int64
		InodesUsed:     int64(st.Files - st.Ffree),     //nolint:gosec // G115: as above
		InodesFree:     int64(st.Ffree),                //nolint:gosec // G115: as above
	}, nil
}

// remove unmounts the volume, detaches every loop device of its image,
// and removes the image and the empty mount point.
func (d *imageDriver) remove(ctx context.Context, v *record, _ func() error) error {
	img, err := d.takeDown(ctx, v)
	if err != nil {
		return err
	}
	if err := os.Remove(img); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// archive unmounts the volume v and removes its mount point, detaches
// every loop device of its image, and renames the image to a's.
func (d *imageDriver) archive(ctx context.Context, v, a *record) error {
	img, err := d.takeDown(ctx, v)
	if err != nil {
		return err
	}
	return move(img, d.img(a))
}

// takeDown unmounts the volume v, removes its mount point and detaches
// every loop device of its image (none of a raw block volume a pod has
// published), and returns the image's path: what remove deletes and
// archive renames.
func (d *imageDriver) takeDown(ctx context.Context, v *record) (string, error) {
	if err := mount.RemoveMountPoint(ctx, d.mounter, d.dir(v)); err != nil {
		return "", err
	}
	img := d.img(v)
	devs, err := d.loops(ctx, img)
	if err != nil {
		return "", err
	}
	if err := d.published(ctx, v, devs); err != nil {
		return "", err
	}
	for _, dev := range devs {
		if _, err := d.run.run(ctx, "losetup", "--detach", dev); err != nil {
			return "", err
		}
	}
	return img, nil
}

// published refuses to remove a raw block volume whose loop device a
// mount shows (a pod's published device): detaching it would leave the
// pod a device without its data. Only mounts of the node the agent sees
// /dev of are found; the caller's "in use" comes from the pods' actual
// state first.
func (d *imageDriver) published(ctx context.Context, v *record, devs []string) error {
	if !v.Block {
		return nil
	}
	for _, dev := range devs {
		users, err := mount.MountsOf(ctx, dev)
		if err != nil {
			return err
		}
		if len(users) > 0 {
			return fmt.Errorf("loop device %s of raw block volume %s is published at %s: leaving it: %w", dev, v.Name, strings.Join(users, ", "), storagedir.ErrInUse)
		}
	}
	return nil
}

// growFile creates path (a regular file, never through a symlink) and
// extends it to size; it never shrinks it.
func growFile(path string, size int64) error {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", path)
	}
	if err == nil && fi.Size() < size {
		err = f.Truncate(size)
	}
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}
