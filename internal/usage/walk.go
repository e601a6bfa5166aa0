package usage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// maxDepth bounds how deep a walk goes: it holds a descriptor per level.
// A directory deeper down counts itself only.
const maxDepth = 256

// batch is how many names a walk reads from a directory at a time.
const batch = 256

// statFn is statx(2); tests replace it to make a file system hang.
type statFn func(dirfd int, name string, flags, mask int, st *unix.Statx_t) error

// walker walks one volume's directory on one mount, du-style.
type walker struct {
	ctx  context.Context
	stat statFn
	pace *pacer
	mnt  uint64 // the mount the walk stays on

	bytes, inodes uint64
	linked        map[uint64]struct{} // inodes with more than one link, counted once
	// progress counts the entries looked at, for the watchdog that tells
	// a hung file system from a large tree.
	progress atomic.Uint64
}

// walkResult is what a walk found, and the file system it is on.
type walkResult struct {
	bytes, inodes uint64
	fs            fsSize
}

const statMask = unix.STATX_TYPE | unix.STATX_INO | unix.STATX_NLINK | unix.STATX_BLOCKS | unix.STATX_MNT_ID

// walk measures the tree at path. It never follows a symlink, never enters
// another mount and stops when ctx ends.
func (w *walker) walk(path string) (walkResult, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return walkResult{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		unix.Close(fd)
		return walkResult{}, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	var st unix.Statx_t
	if err := w.stat(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, statMask, &st); err != nil {
		unix.Close(fd)
		return walkResult{}, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	w.mnt, w.linked = st.Mnt_id, map[uint64]struct{}{}
	w.count(&st)
	if err := w.dir(fd, path, 0); err != nil {
		return walkResult{}, err
	}
	return walkResult{bytes: w.bytes, inodes: w.inodes, fs: sizeOf(&sfs)}, nil
}

// count adds one entry: its blocks, and an inode, a hard-linked one once.
func (w *walker) count(st *unix.Statx_t) {
	w.progress.Add(1)
	if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if _, seen := w.linked[st.Ino]; seen {
			return
		}
		w.linked[st.Ino] = struct{}{}
	}
	w.inodes++
	w.bytes += st.Blocks * 512
}

// dir walks the directory fd, at path and depth levels below the top, and
// closes fd.
func (w *walker) dir(fd int, path string, depth int) error {
	d := os.NewFile(uintptr(fd), path)
	defer d.Close()
	for {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		names, err := d.Readdirnames(batch)
		for _, name := range names {
			if err := w.entry(fd, path, name, depth); err != nil {
				return err
			}
		}
		if err := w.pace.wait(w.ctx, len(names)); err != nil {
			return err
		}
		if errors.Is(err, io.EOF) || (err == nil && len(names) == 0) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	}
}

// entry counts the entry name of the directory dirfd and descends into a
// directory of the walk's mount. An entry on another mount is a mount
// point: neither counted nor entered. An entry gone since it was listed
// is skipped.
func (w *walker) entry(dirfd int, parent, name string, depth int) error {
	var st unix.Statx_t
	err := w.stat(dirfd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, statMask, &st)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case err != nil:
		return &os.PathError{Op: "statx", Path: filepath.Join(parent, name), Err: err}
	case st.Mnt_id != w.mnt:
		return nil
	}
	w.count(&st)
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || depth+1 > maxDepth {
		return nil
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP):
		return nil // replaced since the statx
	case err != nil:
		return &os.PathError{Op: "open", Path: filepath.Join(parent, name), Err: err}
	}
	// A mount may have appeared on name between the statx and the open.
	var here unix.Statx_t
	if err := w.stat(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID, &here); err != nil || here.Mnt_id != w.mnt {
		unix.Close(fd)
		return nil
	}
	return w.dir(fd, filepath.Join(parent, name), depth+1)
}

// walkSlack is how far ahead of its pace a pass's walks may get before
// they sleep: at the default pace, 1,000 entries. A small tree is walked
// without a sleep (a sleep is a wake-up), a large one still keeps to the
// pace over any time longer than that.
const walkSlack = 50 * time.Millisecond

// pacer keeps the walks of a pass to rate entries a second, together: a
// pass of many small walks is paced as one large walk is. A walk
// abandoned may still call it while the pass's next one does.
type pacer struct {
	rate  float64 // entries a second; 0: no limit
	start time.Time
	slack time.Duration // sleep only when ahead by that much
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	mu sync.Mutex
	n  int // guarded by mu: the entries counted since start
}

// wait records n more entries and, when they are ahead of the rate by
// slack or more, sleeps until they are within it.
func (p *pacer) wait(ctx context.Context, n int) error {
	if p.rate <= 0 || n == 0 {
		return nil
	}
	p.mu.Lock()
	p.n += n
	due := p.start.Add(time.Duration(float64(p.n) / p.rate * float64(time.Second)))
	p.mu.Unlock()
	if d := due.Sub(p.now()); d > 0 && d >= p.slack {
		return p.sleep(ctx, d)
	}
	return nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
