package mount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// isMountPoint reports whether path is a mount point: whether its mount ID
// differs from its parent directory's. Device numbers cannot tell: a bind
// mount of the same file system has its parent's. Both statx calls take
// cached attributes without following a symlink at path (see statAt), so
// the file system mounted at path is not asked anything.
func isMountPoint(path string) (bool, error) {
	path, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	if path == "/" {
		return true, nil
	}
	st, err := statAt(unix.AT_FDCWD, path)
	if err != nil {
		return false, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	parent, err := statAt(unix.AT_FDCWD, filepath.Dir(path))
	if err != nil {
		return false, &os.PathError{Op: "statx", Path: filepath.Dir(path), Err: err}
	}
	return st.Mnt_id != parent.Mnt_id, nil
}

// FileID identifies a file: its file system's device and its inode.
type FileID struct{ Dev, Ino uint64 }

// MountRoot reports whether path is a mount point and, when it is, which
// directory it shows: two mount points with the same FileID are binds of
// the same directory. Mounts themselves are told apart by mount ID (see
// IsMountPoint); the FileID says what a mount shows.
func MountRoot(ctx context.Context, path string) (FileID, bool, error) {
	type root struct {
		id      FileID
		mounted bool
	}
	r, err := Bounded(ctx, func() (root, error) {
		mounted, err := isMountPoint(path)
		if err != nil || !mounted {
			return root{}, err
		}
		st, err := statAt(unix.AT_FDCWD, path)
		if err != nil {
			return root{}, &os.PathError{Op: "statx", Path: path, Err: err}
		}
		return root{FileID{unix.Mkdev(st.Dev_major, st.Dev_minor), st.Ino}, true}, nil
	})
	return r.id, r.mounted, err
}

// maxScanDepth bounds scanMounts, which holds a descriptor per level.
const maxScanDepth = 32

// errTooDeep says a tree goes deeper than scanMounts looks.
var errTooDeep = errors.New("tree deeper than the mount scan goes")

// scanMounts lists the mount points at or below dir by walking dir: dir
// itself when it is a mount point, otherwise every entry below it whose
// mount ID differs from dir's. It never follows a symlink, never enters
// another mount (so a dead NFS server mounted below cannot hang it) and
// never asks a file system for fresh attributes. Its cost is that of the
// tree, whatever the number of mounts on the node. It gives up with
// errTooDeep below maxScanDepth levels. A missing dir holds no mounts.
func scanMounts(ctx context.Context, dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	mounted, err := isMountPoint(dir)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, nil
	case err != nil:
		return nil, err
	case mounted:
		return []string{dir}, nil
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP):
		return nil, nil // gone, a file or a symlink: nothing is below it
	case err != nil:
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	st, err := statAt(fd, "")
	if err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "statx", Path: dir, Err: err}
	}
	buf := getDirentBuf()
	defer putDirentBuf(buf)
	s := scanner{ctx: ctx, mnt: st.Mnt_id, buf: *buf}
	err = s.dir(fd, dir, 0)
	return s.found, err
}

// scanner walks one tree that lives on the mount with ID mnt.
type scanner struct {
	ctx   context.Context
	mnt   uint64
	found []string
	// buf is getdents64's buffer, shared by every level: a level has
	// copied its batch's names out of it before it descends.
	buf []byte
}

// dir scans the directory fd, at path and depth levels below the top, and
// closes fd.
func (s *scanner) dir(fd int, path string, depth int) error {
	defer unix.Close(fd)
	var stop error // an entry's error, or the context's: not a read error
	err := ReadDirents(fd, s.buf, func(batch []Dirent) error {
		if stop = s.ctx.Err(); stop != nil {
			return stop
		}
		for _, e := range batch {
			if stop = s.entry(fd, path, e.Name, depth); stop != nil {
				return stop
			}
		}
		return nil
	})
	if err != nil && stop == nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return err
}

// entry looks at the entry name of the directory dirfd: it records a mount
// point and descends into a directory of the tree's mount.
// The entry's path is made only for a directory, a mount point or an
// error: most entries are files, and need none.
func (s *scanner) entry(dirfd int, parent, name string, depth int) error {
	st, err := statAt(dirfd, name)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case err != nil:
		return &os.PathError{Op: "statx", Path: filepath.Join(parent, name), Err: err}
	case st.Mnt_id != s.mnt:
		s.found = append(s.found, filepath.Join(parent, name))
		return nil
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return nil
	case depth+1 > maxScanDepth:
		return errTooDeep
	}
	path := filepath.Join(parent, name)
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP):
		return nil // replaced since the statx: no longer a directory here
	case err != nil:
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	// A mount may have appeared on name between the statx and the open.
	if st, err = statAt(fd, ""); err != nil || st.Mnt_id != s.mnt {
		unix.Close(fd)
		if err != nil {
			return &os.PathError{Op: "statx", Path: path, Err: err}
		}
		s.found = append(s.found, path)
		return nil
	}
	return s.dir(fd, path, depth+1)
}

// mountsInTable lists the mount points at or below dir from the kernel's
// mount table, deepest first: the way for trees too deep to walk.
func mountsInTable(dir string) ([]string, error) {
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	paths := make([]string, 0, len(infos))
	for i := len(infos) - 1; i >= 0; i-- {
		paths = append(paths, infos[i].Mountpoint)
	}
	return paths, nil
}
