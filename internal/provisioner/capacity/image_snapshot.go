package capacity

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// An image snapshot is a copy of the volume's image, <root>/.snapshots/
// <name>.img, taken while the volume's ext4 is frozen (FIFREEZE: its
// writes are held and all it has is on the image) so that it is of one
// moment. The copy is a reflink (FICLONE: O(1), sharing the image's
// extents) where the root's file system has them (btrfs, XFS), else a
// sparse copy (SEEK_DATA/SEEK_HOLE: only what the image has allocated is
// read and written, its holes stay holes). A volume made from a snapshot
// is a copy of its image, and a clone a copy of the frozen volume's; the
// copy is checked (e2fsck, which also replays the journal a frozen copy
// holds), given a new file system UUID (tune2fs -U random: two mounted
// file systems with one UUID confuse blkid, udev's by-uuid links and
// anything mounting by UUID), grown to the new volume's size and mounted
// like any volume.

// Freezing ioctls (linux/fs.h): _IOWR('X', 119, int) and _IOWR('X', 120, int).
const (
	fiFreeze = 0xc0045877
	fiThaw   = 0xc0045878
)

// maxCopy bounds a copy of an image that holds no volume's writes (a
// restore from a snapshot): a sparse copy of a large image reads and
// writes all it holds. A copy of a frozen volume is bounded by the
// driver's tool timeout instead (Config.Timeout).
const maxCopy = time.Hour

// copyChunk is what one copy_file_range (or read and write) copies.
const copyChunk = 8 << 20

// errThawedEarly: the volume's writes were let go before the copy was done.
var errThawedEarly = errors.New("the volume's file system was thawed before its copy was done, so the copy is not of one moment")

func (d *imageDriver) snapImg(s *record) string {
	return filepath.Join(d.root, snapshotDir, s.Name+ImageSuffix)
}

func (d *imageDriver) snapshotExists(s *record) (bool, error) { return lexists(d.snapImg(s)) }

// snapshot copies v's image, frozen, to the snapshot's. Bytes is what the
// copy has allocated.
func (d *imageDriver) snapshot(ctx context.Context, v, s *record, save func() error) error {
	reflinked, err := d.frozenCopy(ctx, v, d.snapImg(s))
	if err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(d.snapImg(s), &st); err != nil {
		return &os.PathError{Op: "lstat", Path: d.snapImg(s), Err: err}
	}
	s.Bytes, s.Reflinked = st.Blocks*512, reflinked
	return save()
}

// removeSnapshot removes the snapshot's image, never attached.
func (d *imageDriver) removeSnapshot(_ context.Context, s *record, _ func() error) error {
	crashPoint()
	defer crashPoint()
	if err := os.Remove(d.snapImg(s)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// snapshotPromised: a sparse copy has taken all it takes already; a
// reflink may still take all its Bytes (the volume overwriting what they
// share).
func (d *imageDriver) snapshotPromised(_ context.Context, s *record) (int64, error) {
	if s.Reflinked {
		return s.Bytes, nil
	}
	return 0, nil
}

// createFrom copies the snapshot's image, or the frozen volume's, to v's,
// gives the copy a UUID of its own, mounts it and grows it to hold v.Size.
func (d *imageDriver) createFrom(ctx context.Context, v, from *record, save func() error) error {
	img := d.img(v)
	var reflinked bool
	var err error
	if from.Kind == snapshotKind {
		cctx, cancel := context.WithTimeout(ctx, maxCopy)
		reflinked, err = copyImage(cctx, d.snapImg(from), img)
		cancel()
		if err == nil {
			err = syncFile(img)
		}
	} else {
		reflinked, err = d.frozenCopy(ctx, from, img)
	}
	if err != nil {
		return err
	}
	if reflinked {
		v.Reflinked = true
		if err := save(); err != nil {
			return err
		}
	}
	if err := d.check(ctx, img); err != nil {
		return err
	}
	if _, err := d.run.run(ctx, "tune2fs", "-U", "random", img); err != nil {
		return err
	}
	if err := d.attach(ctx, v); err != nil {
		return err
	}
	dev, err := d.loop(ctx, img)
	if err != nil {
		return err
	}
	want, err := d.expandedSize(ctx, v, true)
	if err != nil {
		return err
	}
	have, err := fileSize(img)
	if err != nil {
		return err
	}
	if want > have {
		if err := d.growFS(ctx, v, dev, want, true); err != nil { // nothing has its path yet
			return err
		}
	}
	return d.fit(ctx, v, dev, true)
}

// frozenCopy copies the image of the volume v to dst while v's file
// system is frozen, for at most the driver's tool timeout
// (Config.Timeout): a copy not done by then fails, and the volume is
// thawed all the same. It reports whether the copy is a reflink.
func (d *imageDriver) frozenCopy(ctx context.Context, v *record, dst string) (bool, error) {
	if err := d.attach(ctx, v); err != nil { // mounted, so that it can be frozen
		return false, err
	}
	dev, err := d.loop(ctx, d.img(v))
	if err != nil {
		return false, err
	}
	f, err := freeze(ctx, d.dir(v), dev, d.run.timeout)
	if err != nil {
		return false, err
	}
	defer f.thaw() //nolint:errcheck // a second thaw, after an early return: nothing to report
	cctx, cancel := context.WithDeadline(ctx, f.deadline)
	defer cancel()
	start := time.Now()
	reflinked, err := copyImage(cctx, d.img(v), dst)
	if terr := f.thaw(); terr != nil {
		err = errors.Join(err, fmt.Errorf("volume %s: %w", v.Name, terr))
	}
	d.log.Info("image volume frozen for a copy", zap.String("volume", v.Name), zap.Duration("frozen", time.Since(start)),
		zap.Bool("reflink", reflinked), zap.Error(err))
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return false, fmt.Errorf("copying the image of volume %s took longer than %s, the most its writes are held: %w (a local path root that has reflinks, btrfs or XFS, copies at once)", v.Name, d.run.timeout, err)
	}
	if err != nil {
		return false, err
	}
	return reflinked, syncFile(dst)
}

// freezer holds a frozen file system: its root opened, and a timer that
// thaws it at the deadline whatever the caller is doing.
type freezer struct {
	dir      string
	deadline time.Time
	timer    *time.Timer

	mu      sync.Mutex
	fd      int  // guarded by mu; -1 once closed
	frozen  bool // guarded by mu
	expired bool // guarded by mu: the timer thawed it
}

// freeze freezes the file system mounted on dir, which must be the root of
// the file system on dev (opened without following a symlink and checked
// by its descriptor), for at most bound. FIFREEZE waits for the writes
// under way; a wait past the bound is given up, and a freeze that lands
// after that is thawed at once. A crash while frozen leaves it frozen
// (the kernel keeps a freeze past the process): Recover thaws every
// mounted image volume (thawLeft).
func freeze(ctx context.Context, dir, dev string, bound time.Duration) (*freezer, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	var m, b unix.Stat_t
	if err = unix.Fstat(fd, &m); err == nil {
		err = unix.Stat(dev, &b)
	}
	if err != nil || m.Dev != b.Rdev || m.Ino != 2 { // ext4's root directory is inode 2
		_ = unix.Close(fd)
		return nil, errors.Join(err, fmt.Errorf("%s is not the root of the file system on %s; not freezing it", dir, dev))
	}
	f := &freezer{dir: dir, fd: fd, deadline: time.Now().Add(bound)}
	ctx, cancel := context.WithDeadline(ctx, f.deadline)
	defer cancel()
	crashPoint()
	done := make(chan error, 1)
	go func() { done <- unix.IoctlSetInt(fd, fiFreeze, 0) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		go func() { // thaw a freeze that lands late, then let go of the root
			if <-done == nil {
				_ = unix.IoctlSetInt(fd, fiThaw, 0)
			}
			_ = unix.Close(fd)
		}()
		return nil, fmt.Errorf("freeze %s: writes under way did not finish within %s: %w", dir, bound, ctx.Err())
	}
	if err != nil {
		_ = unix.Close(fd)
		return nil, &os.PathError{Op: "FIFREEZE", Path: dir, Err: err}
	}
	f.frozen = true
	f.timer = time.AfterFunc(time.Until(f.deadline), func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.frozen {
			f.expired = true
			_ = f.thawLocked()
		}
	})
	crashPoint()
	return f, nil
}

// thaw lets the file system's writes go and closes its root; a second
// call does nothing. It fails with errThawedEarly when the timer (or
// anyone else) thawed it first.
func (f *freezer) thaw() error {
	f.timer.Stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fd < 0 {
		return nil
	}
	var err error
	if f.frozen {
		crashPoint()
		err = f.thawLocked()
	}
	if f.expired {
		err = errors.Join(err, errThawedEarly)
	}
	_ = unix.Close(f.fd)
	f.fd = -1
	return err
}

func (f *freezer) thawLocked() error {
	f.frozen = false
	err := unix.IoctlSetInt(f.fd, fiThaw, 0)
	if errors.Is(err, unix.EINVAL) { // not frozen: someone thawed it
		return errThawedEarly
	}
	if err != nil {
		return &os.PathError{Op: "FITHAW", Path: f.dir, Err: err}
	}
	return nil
}

// thawLeft thaws the file system mounted on dir if it is frozen: a
// snapshot cut short by a crash leaves it so, holding every write of its
// pods. It reports whether it was frozen.
func thawLeft(dir string) (bool, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd) //nolint:errcheck // read only
	err = unix.IoctlSetInt(fd, fiThaw, 0)
	switch {
	case errors.Is(err, unix.EINVAL):
		return false, nil // not frozen
	case err != nil:
		return false, &os.PathError{Op: "FITHAW", Path: dir, Err: err}
	}
	return true, nil
}

// copyImage copies the image src to dst, a new file (never over anything,
// never through a symlink): a reflink where the file system has them,
// else a sparse copy. It reports whether it made a reflink. The caller
// syncs dst (syncFile).
func copyImage(ctx context.Context, src, dst string) (bool, error) {
	in, err := unix.Open(src, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, &os.PathError{Op: "open", Path: src, Err: err}
	}
	defer unix.Close(in) //nolint:errcheck // read only
	var st unix.Stat_t
	if err := unix.Fstat(in, &st); err != nil {
		return false, &os.PathError{Op: "fstat", Path: src, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, fmt.Errorf("%s is not a regular file", src)
	}
	crashPoint()
	defer crashPoint()
	out, err := unix.Open(dst, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return false, &os.PathError{Op: "open", Path: dst, Err: err}
	}
	f := os.NewFile(uintptr(out), dst)
	reflinked := false
	err = unix.IoctlFileClone(out, in)
	switch {
	case err == nil:
		reflinked = true
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOTTY), errors.Is(err, unix.EXDEV),
		errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
		err = sparseCopy(ctx, in, out, st.Size)
	default:
		err = &os.PathError{Op: "FICLONE", Path: dst, Err: err}
	}
	return reflinked, errors.Join(err, f.Close())
}

// syncFile writes the file at path to disk: a copy is made durable
// after the volume it is of is thawed, not while its writes are held.
func syncFile(path string) error {
	crashPoint()
	defer crashPoint()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd) //nolint:errcheck // read only; synced just before
	if err := unix.Fsync(fd); err != nil {
		return &os.PathError{Op: "fsync", Path: path, Err: err}
	}
	return nil
}

// sparseCopy copies what src has allocated (SEEK_DATA to SEEK_HOLE) to
// the same offsets of dst, copyChunk at a time, checking ctx between
// chunks, and gives dst src's size: src's holes stay holes.
func sparseCopy(ctx context.Context, in, out int, size int64) error {
	var buf []byte
	for off := int64(0); off < size; {
		data, err := unix.Seek(in, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // nothing more but a hole
		}
		if err != nil {
			return fmt.Errorf("SEEK_DATA: %w", err)
		}
		hole, err := unix.Seek(in, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("SEEK_HOLE: %w", err)
		}
		for data < hole {
			if err := ctx.Err(); err != nil {
				return err
			}
			n, err := copyRange(in, out, data, min(hole-data, copyChunk), &buf)
			if err != nil {
				return err
			}
			data += n
		}
		off = hole
	}
	return unix.Ftruncate(out, size)
}

// copyRange copies up to n bytes at off from in to out: in the kernel
// (copy_file_range), or by read and write where it cannot. It returns
// what it copied, at least one byte.
func copyRange(in, out int, off, n int64, buf *[]byte) (int64, error) {
	roff, woff := off, off
	w, err := unix.CopyFileRange(in, &roff, out, &woff, int(n), 0)
	switch {
	case err == nil && w > 0:
		return int64(w), nil
	case err == nil:
		return 0, fmt.Errorf("copy_file_range: end of the image at %d bytes", off)
	case !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EOPNOTSUPP):
		return 0, fmt.Errorf("copy_file_range: %w", err)
	}
	if *buf == nil {
		*buf = make([]byte, copyChunk)
	}
	r, err := unix.Pread(in, (*buf)[:n], off)
	if err != nil || r == 0 {
		return 0, errors.Join(fmt.Errorf("read the image at %d bytes", off), err)
	}
	if _, err := unix.Pwrite(out, (*buf)[:r], off); err != nil {
		return 0, fmt.Errorf("write the copy at %d bytes: %w", off, err)
	}
	return int64(r), nil
}

// thawVolume thaws the mounted volume v if a snapshot cut short left it
// frozen, and says so.
func (d *imageDriver) thawVolume(v *record) error {
	thawed, err := thawLeft(d.dir(v))
	if thawed {
		d.log.Warn("image volume found frozen (a snapshot was cut short): thawed", zap.String("volume", v.Name))
	}
	return err
}
