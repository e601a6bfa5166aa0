package hostroot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// maxSymlinks bounds the symlinks one OpenOwned follows, as the kernel
// bounds a path's (ELOOP after 40).
const maxSymlinks = 40

// ErrNotOwned says a directory that OpenOwned went through can be written
// by someone who is not root: whoever that is can make the path name
// something else.
var ErrNotOwned = errors.New("a user other than root can change what the path names")

// OpenOwned opens the host path p (O_PATH), as OpenPath does, symlinks and
// ".." resolved inside the root, and checks that no one but root (or the
// agent's own user) can change what p names: every directory it goes
// through, including those holding the symlinks it follows, is theirs and
// writable by no one else, or sticky (/tmp) with the entry taken from it
// theirs. Otherwise it fails with ErrNotOwned, naming the directory: a
// user who can write it can swap an entry for a symlink to any place,
// before the open as well as after it, so only a path such a user cannot
// change is trusted.
//
// It resolves one name at a time from the descriptor of the directory
// before it, and checks each directory through that descriptor, so the
// check and the open see the same files. The descriptor returned is what
// the caller should use from then on (mount from it, stat it): p itself
// may name something else by the time the caller would look again.
func (r Root) OpenOwned(p string) (int, error) {
	w := ownedWalk{root: r.fd, uid: uint32(os.Geteuid()), todo: names(p)} //nolint:gosec // G115: a uid fits 32 bits
	fd, err := w.run()
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", p, err)
	}
	return fd, nil
}

// ownedWalk is one OpenOwned: the names left to resolve, and where the
// walk is.
type ownedWalk struct {
	root  int
	uid   uint32   // the agent's own user, trusted as root is
	todo  []string // names left, symlink targets spliced in
	at    string   // the host path of the directory the walk is in
	depth int      // levels below the root: ".." there stays there
	links int      // symlinks followed
}

func (w *ownedWalk) run() (int, error) {
	dir, err := w.openRoot()
	if err != nil {
		return -1, err
	}
	for len(w.todo) > 0 {
		name := w.todo[0]
		w.todo = w.todo[1:]
		next, last, err := w.step(dir, name)
		if err != nil || last {
			unix.Close(dir)
			return next, err
		}
		if next >= 0 {
			unix.Close(dir)
			dir = next
		}
	}
	return dir, nil
}

// step resolves name in dir. It returns the directory to go on from (-1:
// stay in dir), or, with last set, the final file, opened.
func (w *ownedWalk) step(dir int, name string) (next int, last bool, err error) {
	if name == ".." {
		if w.depth == 0 {
			return -1, false, nil // the root's parent is the root, as in a chroot
		}
		up, err := retry(func() (int, error) {
			return unix.Openat(dir, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		})
		if err != nil {
			return -1, false, &fs.PathError{Op: "open", Path: path.Join(w.at, ".."), Err: err}
		}
		w.at, w.depth = path.Dir(w.at), w.depth-1
		return up, false, nil
	}
	here := path.Join(w.at, name)
	sticky, err := w.trusted(dir)
	if err != nil {
		return -1, false, fmt.Errorf("open %s: %w", here, err)
	}
	fd, err := retry(func() (int, error) {
		return unix.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return -1, false, fmt.Errorf("open %s: %w", here, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, false, fmt.Errorf("stat %s: %w", here, err)
	}
	if sticky && !w.trustedUID(st.Uid) {
		unix.Close(fd)
		return -1, false, fmt.Errorf("open %s: %w: %s is writable by others, sticky, and its entry %s belongs to uid %d", here, ErrNotOwned, w.at, name, st.Uid)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		abs, err := w.follow(fd)
		unix.Close(fd)
		if err != nil {
			return -1, false, fmt.Errorf("readlink %s: %w", here, err)
		}
		if !abs {
			return -1, false, nil
		}
		root, err := w.openRoot()
		return root, false, err
	case unix.S_IFDIR:
		w.at, w.depth = here, w.depth+1
		return fd, false, nil
	}
	if len(w.todo) > 0 {
		unix.Close(fd)
		return -1, false, &fs.PathError{Op: "open", Path: here, Err: unix.ENOTDIR}
	}
	return fd, true, nil
}

// follow splices the target of the symlink fd into the names left, and
// reports whether it is absolute: the walk then starts again from the root.
func (w *ownedWalk) follow(fd int) (bool, error) {
	if w.links++; w.links > maxSymlinks {
		return false, unix.ELOOP
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return false, err
	}
	target := string(buf[:n])
	w.todo = append(names(target), w.todo...)
	return strings.HasPrefix(target, "/"), nil
}

// openRoot opens the root, where the walk starts.
func (w *ownedWalk) openRoot() (int, error) {
	w.at, w.depth = "/", 0
	return retry(func() (int, error) {
		return unix.Openat(w.root, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
}

// trusted checks that only root or the agent's user can change the
// entries of the directory dir: it is theirs, and writable by no one
// else, or sticky: then the owner of each entry can too (the caller checks
// the entry's owner).
func (w *ownedWalk) trusted(dir int) (sticky bool, err error) {
	var d unix.Stat_t
	if err := unix.Fstat(dir, &d); err != nil {
		return false, err
	}
	switch {
	case !w.trustedUID(d.Uid):
		return false, fmt.Errorf("%w: %s belongs to uid %d", ErrNotOwned, w.at, d.Uid)
	case d.Mode&0o022 == 0:
		return false, nil
	case d.Mode&unix.S_ISVTX == 0:
		return false, fmt.Errorf("%w: %s is writable by its group or by others (mode %04o)", ErrNotOwned, w.at, d.Mode&0o7777)
	}
	return true, nil
}

func (w *ownedWalk) trustedUID(uid uint32) bool { return uid == 0 || uid == w.uid }

// names splits a path into its names, without empty ones and ".".
func names(p string) []string {
	var out []string
	for n := range strings.SplitSeq(p, "/") {
		if n != "" && n != "." {
			out = append(out, n)
		}
	}
	return out
}
