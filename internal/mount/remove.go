package mount

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// RemoveAll removes dir and everything below it, like os.RemoveAll, but it
// refuses to start when a mount point lies at or below dir (a tmpfs not yet
// unmounted, a bind mount a container made) and, as a second line of defence
// for the window between that check and the removal, it never descends into
// a directory on another device. Symlinks are removed, never followed.
// A dir that does not exist is not an error.
func RemoveAll(ctx context.Context, m Mounter, dir string) error {
	mounts, err := m.MountsUnder(ctx, dir)
	if err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	if len(mounts) > 0 {
		return fmt.Errorf("remove %s: %w: %v", dir, ErrMountPointsRemain, mounts)
	}
	return removeTree(dir)
}

func removeTree(dir string) error {
	parent, err := os.Open(filepath.Dir(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	defer parent.Close()
	var st unix.Stat_t
	if err := unix.Fstatat(int(parent.Fd()), filepath.Base(dir), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	if err := removeAt(int(parent.Fd()), filepath.Base(dir), &st, st.Dev); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// removeAt removes name (described by st) relative to the directory dirfd.
func removeAt(dirfd int, name string, st *unix.Stat_t, dev uint64) error {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return ignoreMissing(unix.Unlinkat(dirfd, name, 0))
	}
	if st.Dev != dev {
		return fmt.Errorf("%s is on another device: refusing to cross a mount point", name)
	}
	// Entries removed while reading a directory can make the read skip
	// others; try again while the directory is still not empty.
	for attempt := 0; ; attempt++ {
		if err := emptyDirAt(dirfd, name, dev); err != nil {
			return err
		}
		err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		if !errors.Is(err, unix.ENOTEMPTY) || attempt == 2 {
			return ignoreMissing(err)
		}
	}
}

// emptyDirAt removes every entry of the directory name in dirfd.
func emptyDirAt(dirfd int, name string, dev uint64) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return ignoreMissing(err)
	}
	d := os.NewFile(uintptr(fd), name)
	defer d.Close()
	for {
		names, err := d.Readdirnames(256)
		for _, child := range names {
			if err := removeChild(fd, child, dev); err != nil {
				return fmt.Errorf("%s/%w", name, err)
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(names) == 0) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read directory %s: %w", name, err)
		}
	}
}

func removeChild(dirfd int, name string, dev uint64) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return ignoreMissing(err)
	}
	return removeAt(dirfd, name, &st, dev)
}

func ignoreMissing(err error) error {
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}
