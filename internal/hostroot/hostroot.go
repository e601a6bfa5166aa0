// Package hostroot resolves host paths the way the host's kernel would, when
// the host's root file system is mounted somewhere below the agent's own
// (--host-root, /host in the DaemonSet). It opens, stats and creates; it
// never removes anything.
package hostroot

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Root is the host's root file system, open. Host paths are resolved in it
// the way the host's kernel would resolve them: every symlink, absolute or
// relative, and every ".." in a link target stays inside the root, as if
// the agent had chrooted into it (openat2 with RESOLVE_IN_ROOT). Resolving
// filepath.Join(HostRoot, path) in the agent's own view instead would follow
// an absolute link such as /var/run -> /run into the agent's container.
//
// Every path a Root method takes or names in an error is a clean absolute
// host path, never one prefixed with the host root.
type Root struct {
	fd int
	// own is true when the root is the agent's own "/": there the kernel's
	// ordinary resolution already is the host's, on any kernel version.
	own bool
}

// Open opens hostRoot ("" means "/").
func Open(hostRoot string) (Root, error) {
	if hostRoot == "" {
		hostRoot = "/"
	}
	fd, err := retry(func() (int, error) {
		return unix.Open(hostRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return Root{}, fmt.Errorf("open host root %s: %w", hostRoot, err)
	}
	return Root{fd: fd, own: filepath.Clean(hostRoot) == "/"}, nil
}

// Close closes the root.
func (r Root) Close() { unix.Close(r.fd) }

// OpenPath opens the host path p (following a symlink at its end, like stat)
// and returns the file descriptor.
func (r Root) OpenPath(p string, flags int) (int, error) {
	flags |= unix.O_CLOEXEC
	fd, err := retry(func() (int, error) {
		if r.own {
			return unix.Openat(r.fd, p, flags, 0)
		}
		// RESOLVE_IN_ROOT refuses magic links (/proc/<pid>/root...) today;
		// RESOLVE_NO_MAGICLINKS keeps it so, as the kernel asks.
		return unix.Openat2(r.fd, p, &unix.OpenHow{
			Flags:   uint64(flags), //nolint:gosec // G115: open(2) flags are non-negative
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
	})
	if errors.Is(err, unix.ENOSYS) {
		err = fmt.Errorf("openat2, needed below a host root, requires Linux 5.6 or later: %w", err)
	}
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return fd, nil
}

// FileType returns the type bits (unix.S_IFMT) of the host path p.
func (r Root) FileType(p string) (uint32, error) {
	fd, err := r.OpenPath(p, unix.O_PATH)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	return st.Mode & unix.S_IFMT, nil
}

// MkdirAll creates the missing directories of the host path p with mode
// 0755 (less the umask), like mkdir -p on the host, and sets the last one
// to exactly 0755 if it created it. Each directory is made in, and then
// opened from, the directory its parent resolved to, so a symlink swapped
// in meanwhile cannot redirect the chmod.
func (r Root) MkdirAll(p string) error {
	dir, err := r.OpenPath("/", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer func() { unix.Close(dir) }()
	made, done := false, "/"
	for name := range strings.SplitSeq(strings.TrimPrefix(p, "/"), "/") {
		if name == "" {
			continue
		}
		done = path.Join(done, name)
		next, err := r.OpenPath(done, unix.O_PATH|unix.O_DIRECTORY)
		made = false
		if errors.Is(err, fs.ErrNotExist) {
			next, made, err = mkdirAt(dir, name, done)
		}
		if err != nil {
			return err
		}
		unix.Close(dir)
		dir = next
	}
	if made {
		if err := unix.Fchmod(dir, 0o755); err != nil {
			return &fs.PathError{Op: "chmod", Path: p, Err: err}
		}
	}
	return nil
}

// mkdirAt makes the directory name in dir, or finds one that appeared
// meanwhile, and opens it without following a symlink. p is its host path.
func mkdirAt(dir int, name, p string) (fd int, made bool, err error) {
	mkErr := unix.Mkdirat(dir, name, 0o755)
	if mkErr != nil && !errors.Is(mkErr, unix.EEXIST) {
		return -1, false, &fs.PathError{Op: "mkdir", Path: p, Err: mkErr}
	}
	fd, err = retry(func() (int, error) {
		return unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	switch {
	case err == nil:
		return fd, mkErr == nil, nil
	case mkErr != nil: // e.g. a dangling symlink: fail as mkdir -p does
		return -1, false, &fs.PathError{Op: "mkdir", Path: p, Err: mkErr}
	default:
		return -1, false, &fs.PathError{Op: "open", Path: p, Err: err}
	}
}

// CreateFile creates the host path p as an empty file with mode 0644 in
// its existing parent directory. It reports false, and creates nothing, if
// something (a symlink too, which it does not follow) is already there.
func (r Root) CreateFile(p string) (bool, error) {
	if p == "/" {
		return false, nil
	}
	parent, err := r.OpenPath(path.Dir(p), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return false, err
	}
	defer unix.Close(parent)
	fd, err := retry(func() (int, error) {
		return unix.Openat(parent, path.Base(p), unix.O_RDONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	})
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	if err != nil {
		return false, &fs.PathError{Op: "create", Path: p, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, 0o644); err != nil {
		return false, &fs.PathError{Op: "chmod", Path: p, Err: err}
	}
	return true, nil
}

// retry calls open again while it is interrupted (EINTR) or, for openat2,
// while a concurrent rename or mount makes the kernel refuse to vouch for
// a ".." it resolved (EAGAIN), a bounded number of times.
func retry(open func() (int, error)) (int, error) {
	for range 32 {
		fd, err := open()
		if !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN) {
			return fd, err
		}
	}
	return open()
}
