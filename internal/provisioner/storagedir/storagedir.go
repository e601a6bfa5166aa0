package storagedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxName is the longest directory entry name Linux file systems accept.
const maxName = 255

// beneath is how every path below base is resolved: never through a
// symlink, never out of the starting directory, never into another mount.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV

// ValidRel checks a path given to Create, Remove or Archive: non-empty,
// relative, clean (filepath.Clean leaves it as it is), not "." (base
// itself), without a ".." component or a NUL byte, and no component longer
// than 255 bytes.
func ValidRel(rel string) error {
	switch {
	case rel == "" || rel == ".":
		return fmt.Errorf("path %q: want a directory below the base, not the base itself", rel)
	case filepath.IsAbs(rel):
		return fmt.Errorf("path %q: want a relative path", rel)
	case strings.IndexByte(rel, 0) >= 0:
		return fmt.Errorf("path %q: has a NUL byte", rel)
	case filepath.Clean(rel) != rel:
		return fmt.Errorf("path %q: not clean (want %q)", rel, filepath.Clean(rel))
	}
	for _, name := range strings.Split(rel, "/") {
		if name == ".." {
			return fmt.Errorf("path %q: has a \"..\" component", rel)
		}
		if len(name) > maxName {
			return fmt.Errorf("path %q: component %.32q... is %d bytes, longer than %d", rel, name, len(name), maxName)
		}
	}
	return nil
}

// errBase marks a failure to open base itself, as opposed to a path below it.
var errBase = errors.New("base directory")

// openBase opens base, which must be an absolute, clean path without
// symlinks. A missing base is an error for every operation: it may be a
// disk or an export that is not mounted.
func openBase(base string) (int, error) {
	if !filepath.IsAbs(base) || filepath.Clean(base) != base {
		return -1, fmt.Errorf("base %q: want an absolute, clean path", base)
	}
	fd, err := openat2(unix.AT_FDCWD, base, unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		return -1, fmt.Errorf("%w: %w", errBase, pathError("open", base, err))
	}
	return fd, nil
}

// openBelow opens the directory rel below dirfd, resolved beneath it.
func openBelow(dirfd int, rel string) (int, error) {
	return openat2(dirfd, rel, beneath)
}

// openat2 opens a directory for reading. It retries EAGAIN, which openat2
// returns when a rename raced with a RESOLVE_BENEATH lookup, and EINTR.
func openat2(dirfd int, path string, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolve}
	for attempt := 0; ; attempt++ {
		fd, err := unix.Openat2(dirfd, path, &how)
		if (!errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR)) || attempt == 4 {
			return fd, err
		}
	}
}

// openParent opens the directory that holds rel's last component, resolved
// beneath base, and returns it with that component.
func openParent(base, rel string) (int, string, error) {
	fd, err := openBase(base)
	if err != nil {
		return -1, "", err
	}
	dir := filepath.Dir(rel)
	if dir == "." {
		return fd, rel, nil
	}
	parent, err := openBelow(fd, dir)
	unix.Close(fd)
	if err != nil {
		return -1, "", pathError("open", filepath.Join(base, dir), err)
	}
	return parent, filepath.Base(rel), nil
}

// lstatAt stats name in dirfd without following a symlink.
func lstatAt(dirfd int, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// errNotDir says what stands where a directory was expected.
func errNotDir(path string, st unix.Stat_t) error {
	what := "not a directory"
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		what = "a symlink"
	}
	return fmt.Errorf("%s is %s: refusing to touch it", path, what)
}

// pathError names path and explains the errors the resolution rules give.
func pathError(op, path string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		err = fmt.Errorf("a symlink is in the way, refusing to follow it: %w", err)
	case errors.Is(err, unix.EXDEV):
		err = fmt.Errorf("a mount point is in the way, refusing to cross it: %w", err)
	}
	return &os.PathError{Op: op, Path: path, Err: err}
}
