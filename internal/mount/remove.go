package mount

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// RemoveAll removes dir and everything below it, like os.RemoveAll, but
// safely for a directory a container has written into:
//
//   - It refuses to start when the mount table shows a mount point at or
//     below dir (a tmpfs not yet unmounted, a bind mount a container made).
//   - While it removes — the window after that check — it never enters a
//     directory and never removes an entry that is on another mount than
//     dir. Mounts are told apart by mount ID (statx), not by device
//     number: a bind mount of the same file system has the same device.
//   - It never follows a symlink: dir's path must have none (resolve it
//     first), and symlinks below dir are removed, not followed.
//   - It works iteratively, with at most three open descriptors and memory
//     of eight bytes per level, however deep the tree, and its errors name
//     only the depth and the entry, however long the path.
//
// A dir that does not exist is not an error. The removal stops when ctx
// ends.
func RemoveAll(ctx context.Context, m Mounter, dir string) error {
	mounts, err := m.MountsUnder(ctx, dir)
	if err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	if len(mounts) > 0 {
		return fmt.Errorf("remove %s: %w: %v", dir, ErrMountPointsRemain, mounts)
	}
	if err := removeTree(ctx, dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// removeTree removes dir, which must be an absolute path without symlinks.
func removeTree(ctx context.Context, dir string) error {
	parent, err := unix.Openat2(unix.AT_FDCWD, filepath.Dir(dir), &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("the path has a symlink in it: refusing to remove through it (resolve the path first): %w", err)
	case err != nil:
		return err
	}
	defer unix.Close(parent)
	name := filepath.Base(dir)
	st, err := statAt(parent, name)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return ignoreMissing(unix.Unlinkat(parent, name, 0))
	}
	buf := getDirentBuf()
	defer putDirentBuf(buf)
	r := remover{ctx: ctx, mnt: st.Mnt_id, buf: *buf}
	for attempt := 0; ; attempt++ {
		if err := r.empty(parent, name); err != nil {
			return err
		}
		// A container still running can add entries after a directory
		// was emptied; try again a few times, then give up.
		err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR)
		if !errors.Is(err, unix.ENOTEMPTY) || attempt == 2 {
			return ignoreMissing(err)
		}
	}
}

// remover empties one tree that lives on the mount with ID mnt.
type remover struct {
	ctx context.Context
	mnt uint64
	// buf is getdents64's buffer; one directory is read at a time.
	buf []byte
}

// empty removes everything below the directory name in parent, depth first,
// keeping only the current directory open: it descends into a subdirectory
// that is not empty and comes back up through "..", checking that ".." is
// the directory it came from.
func (r remover) empty(parent int, name string) error {
	cur, ino, err := r.openDir(parent, name)
	if err != nil {
		return ignoreMissing(err)
	}
	inodes := []uint64{ino} // of every directory from the top to cur
	defer func() { unix.Close(cur) }()
	for {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		child, err := r.removeEntries(cur)
		if err != nil {
			return fmt.Errorf("at depth %d: %w", len(inodes)-1, err)
		}
		if child != "" {
			next, ino, err := r.openDir(cur, child)
			if err != nil {
				return fmt.Errorf("at depth %d: %s: %w", len(inodes)-1, child, err)
			}
			unix.Close(cur)
			cur, inodes = next, append(inodes, ino)
			continue
		}
		if len(inodes) == 1 {
			return nil // the top directory is empty
		}
		up, ino, err := r.openDir(cur, "..")
		if err != nil {
			return fmt.Errorf("at depth %d: ..: %w", len(inodes)-1, err)
		}
		unix.Close(cur)
		cur, inodes = up, inodes[:len(inodes)-1]
		if ino != inodes[len(inodes)-1] {
			return fmt.Errorf("at depth %d: a directory was moved while it was being removed", len(inodes)-1)
		}
	}
}

// openDir opens the directory name in dirfd without following a symlink,
// and checks that it is on the tree's mount. It returns the descriptor and
// the directory's inode number.
func (r remover) openDir(dirfd int, name string) (int, uint64, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, 0, err
	}
	st, err := statAt(fd, "")
	if err == nil && st.Mnt_id != r.mnt {
		err = errOtherMount(st.Mnt_id)
	}
	if err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	return fd, st.Ino, nil
}

// removeEntries removes the entries of the directory dirfd, a descriptor
// just opened (at offset 0): files, symlinks and empty directories. It
// returns the name of the first subdirectory that is not empty, for the
// caller to descend into, once it has removed every entry that is not a
// directory (the other directories wait for the caller's next visit, when
// that one is gone); it returns "" when the directory is empty.
func (r remover) removeEntries(dirfd int) (string, error) {
	child := ""
	var stop error // an entry's error: not a read error
	err := ReadDirents(dirfd, r.buf, func(batch []Dirent) error {
		for _, e := range batch {
			var c string
			if c, stop = r.removeEntry(dirfd, e.Name, child == ""); stop != nil {
				return stop
			}
			if child == "" {
				child = c
			}
		}
		return nil
	})
	switch {
	case err != nil && stop == nil:
		return "", fmt.Errorf("read directory: %w", err)
	case err != nil:
		return "", err
	}
	return child, nil
}

// removeEntry removes one entry, or returns its name when it is a
// directory that is not empty. With dirs false, a directory is left as
// it is (and "" returned): the caller descends into another one first.
func (r remover) removeEntry(dirfd int, name string, dirs bool) (string, error) {
	st, err := statAt(dirfd, name)
	if errors.Is(err, unix.ENOENT) {
		return "", nil
	}
	if err == nil && st.Mnt_id != r.mnt {
		err = errOtherMount(st.Mnt_id)
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := ignoreMissing(unix.Unlinkat(dirfd, name, 0)); err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return "", nil
	}
	if !dirs {
		return "", nil
	}
	err = ignoreMissing(unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR))
	switch {
	case errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST):
		return name, nil
	case err != nil:
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return "", nil
}

// statAt stats name in dirfd (dirfd itself when name is empty) without
// following a symlink, with its mount ID. AT_STATX_DONT_SYNC takes cached
// attributes: should a mount appear at name after the mount table was
// checked, its file system (a hung FUSE or NFS server) is not asked.
func statAt(dirfd int, name string) (unix.Statx_t, error) {
	flags := unix.AT_SYMLINK_NOFOLLOW | unix.AT_STATX_DONT_SYNC
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	var st unix.Statx_t
	if err := unix.Statx(dirfd, name, flags, unix.STATX_TYPE|unix.STATX_INO|unix.STATX_MNT_ID, &st); err != nil {
		return st, err
	}
	if st.Mask&unix.STATX_MNT_ID == 0 {
		return st, errors.New("the kernel does not report mount IDs (statx STATX_MNT_ID needs Linux 5.8 or later)")
	}
	return st, nil
}

func errOtherMount(id uint64) error {
	return fmt.Errorf("on another mount (mount ID %d): refusing to cross a mount point", id)
}

func ignoreMissing(err error) error {
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}
