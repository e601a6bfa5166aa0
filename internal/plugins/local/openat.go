package local

import (
	"errors"
	"strconv"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The descriptor-level steps of the ownership walk. Nothing here takes a
// path that goes through more than one name: each entry is opened by its
// name relative to its directory's descriptor, and changed through the
// descriptor opened.

// beneath resolves a name from a directory descriptor: never through a
// symlink, never out of the directory, never into another mount.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV

// openat2 opens name in dirfd with flags, resolved with resolve. It retries
// EAGAIN, which openat2 returns when a rename raced with a RESOLVE_BENEATH
// lookup, and EINTR.
func openat2(dirfd int, name string, flags int, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolve} //nolint:gosec // G115: open(2) flags are non-negative
	for attempt := 0; ; attempt++ {
		fd, err := unix.Openat2(dirfd, name, &how)
		if (!errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR)) || attempt == 4 {
			return fd, err
		}
	}
}

// openEntry opens the entry name of dirfd as an O_PATH descriptor, which
// opens nothing (a FIFO or a device is not opened) and refers to a symlink
// itself. A mount point gives EXDEV.
func openEntry(dirfd int, name string) (int, error) {
	return openat2(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW, beneath)
}

// statFd stats what fd refers to, a symlink itself included.
func statFd(fd int) (unix.Statx_t, error) {
	const mask = unix.STATX_TYPE | unix.STATX_MODE | unix.STATX_NLINK | unix.STATX_GID | unix.STATX_INO | unix.STATX_MNT_ID | unix.STATX_SIZE
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, mask, &st); err != nil {
		return st, err
	}
	if st.Mask&unix.STATX_MNT_ID == 0 {
		return st, errors.New("the kernel does not report mount IDs (statx STATX_MNT_ID needs Linux 5.8 or later)")
	}
	return st, nil
}

// openDirAgain opens for reading the directory that the O_PATH descriptor
// fd refers to, and checks that it is the one fd refers to (st).
func openDirAgain(fd int, st unix.Statx_t) (int, error) {
	dir, err := openat2(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY, beneath)
	if err != nil {
		return -1, err
	}
	if err := sameDir(dir, st.Ino, st.Mnt_id); err != nil {
		unix.Close(dir)
		return -1, err
	}
	return dir, nil
}

// openParent opens ".." of dirfd and checks that it is the directory
// (inode ino on mount mnt) the walk came down from: a directory moved
// during the walk is not followed to its new place.
func openParent(dirfd int, ino, mnt uint64) (int, error) {
	up, err := unix.Openat(dirfd, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := sameDir(up, ino, mnt); err != nil {
		unix.Close(up)
		return -1, err
	}
	return up, nil
}

var errMoved = errors.New("a directory was moved while the walk was in it")

func sameDir(fd int, ino, mnt uint64) error {
	st, err := statFd(fd)
	if err != nil {
		return err
	}
	if st.Ino != ino || st.Mnt_id != mnt {
		return errMoved
	}
	return nil
}

// readNames returns the names in the directory dirfd, freshly opened,
// without "." and "..". buf is scratch space.
func readNames(dirfd int, buf []byte) ([]string, error) {
	var names []string
	for {
		n, err := unix.Getdents(dirfd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// chownFd gives what fd refers to the group gid; fd may be an O_PATH
// descriptor, of a symlink too (fchown refuses O_PATH descriptors).
func chownFd(fd, gid int) error {
	return unix.Fchownat(fd, "", -1, gid, unix.AT_EMPTY_PATH)
}

// noFchmodat2 is set once the kernel has answered that it has no
// fchmodat2(2) (before Linux 6.6); tests set it to use the fallback.
var noFchmodat2 atomic.Bool

// chmodFd changes the mode of what the O_PATH descriptor fd refers to,
// never a symlink (Linux has no modes for symlinks; the call fails).
// fchmod refuses O_PATH descriptors (EBADF), and fchmodat's
// AT_SYMLINK_NOFOLLOW is not implemented for chmod. fchmodat2 with
// AT_EMPTY_PATH changes the file itself; without it, chmod of
// /proc/self/fd/<fd> does: the kernel resolves that link to the file the
// descriptor holds, not to a path that could have been swapped. A seccomp
// profile may refuse the newer call with EPERM; the fallback then answers.
func chmodFd(fd int, mode uint32) error {
	if !noFchmodat2.Load() {
		err := fchmodat2(fd, mode)
		switch {
		case errors.Is(err, unix.ENOSYS):
			noFchmodat2.Store(true)
		case !errors.Is(err, unix.EPERM):
			return err
		}
	}
	return unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), mode)
}

var emptyPath = []byte{0}

// fchmodat2 is fchmodat2(fd, "", mode, AT_EMPTY_PATH). x/sys/unix's
// Fchmodat answers ENOSYS as EOPNOTSUPP, which a file system can return
// too; the raw call keeps the two apart.
func fchmodat2(fd int, mode uint32) error {
	_, _, errno := unix.Syscall6(unix.SYS_FCHMODAT2, uintptr(fd), uintptr(unsafe.Pointer(&emptyPath[0])), uintptr(mode), unix.AT_EMPTY_PATH, 0, 0) //nolint:gosec // G103: fchmodat2 has no wrapper in x/sys; the pointer is to a live byte array for the call's duration
	if errno != 0 {
		return errno
	}
	return nil
}
