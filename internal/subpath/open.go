package subpath

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/hostroot"
)

// ErrEscape is wrapped by errors of a subPath that names a symlink or
// would lead out of its volume: it is refused, never followed.
var ErrEscape = errors.New("refusing a symlink or a path out of the volume")

// beneath resolves one path element below a directory descriptor only:
// never through a symlink (a planted one is refused, not followed), a
// magic link of /proc, or "..".
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openVolume opens the volume's directory, whose path comes from the
// agent, as an O_PATH descriptor: a directory below the agent's root, or
// the host path of a hostPath volume, resolved below the host root as
// the hostPath plugin resolves it (following its own symlinks, as the
// kubelet does: a hostPath's path is the pod author's choice, not the
// pod's).
func (p Preparer) openVolume(dir string) (int, error) {
	if strings.HasPrefix(dir, string(p.Root)+"/") {
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, &os.PathError{Op: "open volume", Path: dir, Err: err}
		}
		return fd, nil
	}
	host, err := hostroot.Open(p.HostRoot)
	if err != nil {
		return -1, err
	}
	defer host.Close()
	return host.OpenPath(dir, unix.O_PATH|unix.O_DIRECTORY)
}

// openBeneath opens the subPath p below the volume's descriptor vol and
// returns an O_PATH descriptor of what p names, never of anything outside
// the volume.
//
// An existing p is opened in one openat2 from vol with RESOLVE_BENEATH
// (and RESOLVE_NO_MAGICLINKS): the kernel follows a symlink only while it
// stays below vol, and refuses (EXDEV) an absolute one or one that climbs
// out, atomically, so a link swapped in at any moment leads nowhere. This
// is how the kubelet treats symlinks inside a volume (it resolves them,
// then checks the result is in the volume): a configMap's key is a
// relative link into its ..data directory.
//
// A missing p is made, as the kubelet does, one element at a time from
// the descriptor of its parent, without following any symlink: missing
// elements become directories of mode perm (the volume's mode), each made
// with mkdirat in its opened parent. Nothing is ever resolved by path.
func openBeneath(vol int, p string, perm uint32) (int, error) {
	fd, err := unix.Openat2(vol, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS})
	switch {
	case err == nil:
		return fd, nil
	case errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP):
		return -1, fmt.Errorf("open subPath %q: %w: %w", p, ErrEscape, err)
	case !errors.Is(err, unix.ENOENT):
		return -1, fmt.Errorf("open subPath %q: %w", p, err)
	}
	return makeBeneath(vol, p, perm)
}

// makeBeneath opens p below vol element by element, making the missing
// ones; a symlink on the way is refused (ELOOP), never followed.
func makeBeneath(vol int, p string, perm uint32) (int, error) {
	fd, err := unix.Dup(vol)
	if err != nil {
		return -1, err
	}
	for _, e := range elements(p) {
		next, err := openElement(fd, e, perm)
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("open %q of subPath %q: %w", e, p, err)
		}
		fd = next
	}
	return fd, nil
}

// openElement opens name in the directory dir, making it a directory
// when it is missing.
func openElement(dir int, name string, perm uint32) (int, error) {
	for range 2 {
		fd, err := open(dir, name)
		if !errors.Is(err, unix.ENOENT) {
			return fd, err
		}
		err = unix.Mkdirat(dir, name, perm)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, fmt.Errorf("mkdirat: %w", err)
		}
		if err == nil {
			if err := chmodNew(dir, name, perm); err != nil {
				return -1, err
			}
		}
	}
	return -1, fmt.Errorf("%q keeps disappearing: %w", name, unix.ENOENT)
}

// open opens name in dir as an O_PATH descriptor, refusing symlinks.
func open(dir int, name string) (int, error) {
	fd, err := unix.Openat2(dir, name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: beneath})
	switch {
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV):
		return -1, fmt.Errorf("%w: %w", ErrEscape, err)
	case err != nil:
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		unix.Close(fd)
		return -1, fmt.Errorf("%w: a symlink", ErrEscape)
	}
	return fd, nil
}

// chmodNew gives a directory it has just made its mode without the
// umask, through a descriptor of that directory (never by path).
func chmodNew(dir int, name string, perm uint32) error {
	fd, err := unix.Openat2(dir, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: beneath})
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return fmt.Errorf("%w: %q was replaced after it was made: %w", ErrEscape, name, err)
		}
		return err
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, perm)
}

// fileID is a file's device and inode, read from a descriptor: what
// identifies it (a bind mount shows the same file with the same ID).
type fileID struct{ dev, ino uint64 }

// idOf reads the file ID and mount ID of what fd refers to, or of name
// below fd when name is not empty (never following a symlink).
func idOf(fd int, name string) (fileID, uint64, uint32, error) {
	var stx unix.Statx_t
	flags := unix.AT_SYMLINK_NOFOLLOW | unix.AT_STATX_DONT_SYNC
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	if err := unix.Statx(fd, name, flags, unix.STATX_INO|unix.STATX_TYPE|unix.STATX_MNT_ID, &stx); err != nil {
		return fileID{}, 0, 0, err
	}
	return fileID{dev: unix.Mkdev(stx.Dev_major, stx.Dev_minor), ino: stx.Ino}, stx.Mnt_id, uint32(stx.Mode) & unix.S_IFMT, nil
}
