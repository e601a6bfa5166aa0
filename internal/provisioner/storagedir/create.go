package storagedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// parentMode is the mode of the directories Create makes above the last.
const parentMode = 0o755

// Create makes the directory base/rel, and the directories above it below
// base (mode 0755), and returns its path. The last directory gets exactly
// mode, whatever the umask, also when it existed: a retry after a crash
// between mkdir and chmod must not leave it with the wrong mode. An
// existing directory is reused; a file or a symlink anywhere on the way is
// an error.
func Create(base, rel string, mode os.FileMode) (string, error) {
	c := creation{mode: mode}
	return c.create(base, rel)
}

// creation is one Create or CreateMarked call.
type creation struct {
	mode   os.FileMode
	marked bool   // CreateMarked: markers are written and checked
	owner  string // whom a last directory this call makes is marked for
	mine   bool   // set when the last directory carries owner's marker
	// emptyOnly (CreateMarkedEmpty): an existing last directory not
	// marked for owner is taken only while it holds nothing.
	emptyOnly bool
}

func (c *creation) create(base, rel string) (string, error) {
	if err := ValidRel(rel); err != nil {
		return "", fmt.Errorf("create a directory in %s: %w", base, err)
	}
	dir, err := openBase(base)
	if err != nil {
		return "", fmt.Errorf("create %s: %w", rel, err)
	}
	names := strings.Split(rel, "/")
	for i, name := range names {
		last := i == len(names)-1
		path := filepath.Join(base, filepath.Join(names[:i+1]...))
		next, err := c.mkdirAt(dir, name, path, last)
		unix.Close(dir)
		if err != nil {
			return "", fmt.Errorf("create %s: %w", rel, err)
		}
		dir = next
	}
	unix.Close(dir)
	return filepath.Join(base, rel), nil
}

// mkdirAt makes the directory name in dirfd unless it exists, opens it
// (never through a symlink), marks it or checks its marker (CreateMarked),
// and sets its mode: parentMode when it is new and not the last, c.mode
// when it is the last. It fsyncs dirfd when it made the directory. path
// is for errors.
func (c *creation) mkdirAt(dirfd int, name, path string, last bool) (int, error) {
	err := unix.Mkdirat(dirfd, name, parentMode)
	created := err == nil
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, pathError("mkdir", path, err)
	}
	fd, err := openBelow(dirfd, name)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		if st, serr := lstatAt(dirfd, name); serr == nil {
			err = errNotDir(path, st)
		}
	}
	if err != nil {
		return -1, pathError("open", path, err)
	}
	if c.marked {
		if err := c.mark(fd, path, created, last); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	if err := setUp(dirfd, fd, created, last, c.mode); err != nil {
		unix.Close(fd)
		return -1, pathError("set up", path, err)
	}
	return fd, nil
}

// setUp gives the directory fd in dirfd its mode and, when it is new,
// makes its entry durable.
func setUp(dirfd, fd int, created, last bool, mode os.FileMode) error {
	var err error
	switch {
	case last:
		err = chmodIfNeeded(fd, unixMode(mode))
	case created:
		err = unix.Fchmod(fd, parentMode) // mkdir applied the umask
	}
	if err == nil && created {
		err = unix.Fsync(dirfd)
	}
	return err
}

// chmodIfNeeded sets fd's mode bits to mode unless they are already: on an
// NFS export with root squashing, a chmod may be refused even when it would
// change nothing.
func chmodIfNeeded(fd int, mode uint32) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&0o7777 == mode {
		return nil
	}
	return unix.Fchmod(fd, mode)
}

// unixMode converts a Go file mode's permission and special bits.
func unixMode(mode os.FileMode) uint32 {
	m := uint32(mode.Perm())
	if mode&os.ModeSetuid != 0 {
		m |= unix.S_ISUID
	}
	if mode&os.ModeSetgid != 0 {
		m |= unix.S_ISGID
	}
	if mode&os.ModeSticky != 0 {
		m |= unix.S_ISVTX
	}
	return m
}
