package storagedir

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// MarkerName is the file CreateMarked writes in a directory it makes, to
// record whom it made it for until the caller calls Unmark (the volume's
// PV exists) or RemoveMarked (it never will). A restart between the two
// finds it, so "made by this provisioning" survives a crash. It is a
// dot-name: callers keep dot-names for the agent's own use.
const MarkerName = ".volume-agent-provisioning"

// maxMarker bounds what is read of a marker: an owner is a PV name.
const maxMarker = 512

// Outcome is what RemoveMarked found and did.
type Outcome int

const (
	// Removed: the directory held the owner's marker and nothing else; it
	// is gone.
	Removed Outcome = iota
	// AlreadyGone: there is no directory there.
	AlreadyGone
	// KeptNotMade: the directory has no marker of the owner, so it existed
	// before the owner's provisioning (or another is making it); it is
	// left as it is.
	KeptNotMade
	// KeptNotEmpty: the directory held the owner's marker and more, written
	// after it was made; the marker is removed, the directory kept.
	KeptNotEmpty
)

func (o Outcome) String() string {
	switch o {
	case Removed:
		return "removed"
	case AlreadyGone:
		return "already gone"
	case KeptNotMade:
		return "kept: not made for the owner"
	case KeptNotEmpty:
		return "kept: not empty"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// CreateMarked is Create for directories that may exist already and hold
// someone else's data, such as the subdirectories of an NFS export a
// pathPattern names. It makes base/rel as Create does, and:
//
//   - when it makes the last directory itself and owner is not empty, it
//     writes MarkerName holding owner in it, durably, before it sets the
//     directory's mode;
//   - when the last directory exists, it reads its marker before it
//     touches it: none, and the directory is reused as it is; owner's, and
//     an earlier call for owner made it; another owner's, and it fails
//     without changing anything (that directory is being provisioned for
//     someone else);
//   - an existing directory above the last holding a marker makes it fail
//     too: a volume is never made inside one being provisioned.
//
// It returns the path, and whether the directory carries owner's marker
// (made for owner, by this call or an earlier one).
func CreateMarked(base, rel string, mode os.FileMode, owner string) (string, bool, error) {
	c := creation{mode: mode, marked: true, owner: owner}
	path, err := c.create(base, rel)
	return path, c.mine, err
}

// ErrNotEmpty says that CreateMarkedEmpty found the directory there
// already, not marked for its owner, and holding something.
var ErrNotEmpty = errors.New("a directory that was not made for this volume is taken only while it is empty")

// CreateMarkedEmpty is CreateMarked for a directory whose name someone
// other than the export's owner chose (a claim's labels or annotations
// through a pathPattern), who must never be handed what is there already:
// an existing last directory that does not carry owner's marker is taken
// only while it holds nothing, or nothing but a marker naming no one (a
// crash cut its writing short). Otherwise it fails without changing
// anything, with an error wrapping ErrNotEmpty that names one entry it
// holds. Only the last directory's content is looked at: the directories
// above it are never handed out.
func CreateMarkedEmpty(base, rel string, mode os.FileMode, owner string) (string, bool, error) {
	c := creation{mode: mode, marked: true, owner: owner, emptyOnly: true}
	path, err := c.create(base, rel)
	return path, c.mine, err
}

// mark writes owner's marker in the last directory when this call made
// it, and checks the marker of any directory it did not make. fd is the
// directory, path its name for errors.
func (c *creation) mark(fd int, path string, created, last bool) error {
	if created {
		if !last || c.owner == "" {
			return nil
		}
		if err := writeMarker(fd, c.owner); err != nil {
			return pathError("write marker", filepath.Join(path, MarkerName), err)
		}
		c.mine = true
		return nil
	}
	owner, present, err := readMarker(fd)
	switch {
	case err != nil:
		return pathError("read marker", filepath.Join(path, MarkerName), err)
	case owner == "" && last && c.emptyOnly:
		return checkEmpty(fd, path, present)
	case owner == "":
		return nil
	case last && owner == c.owner:
		c.mine = true
		return nil
	case last:
		return fmt.Errorf("%s is being provisioned for %s (its %s says so): refusing to share it", path, owner, MarkerName)
	}
	return fmt.Errorf("%s is being provisioned for %s (its %s says so): refusing to make a directory inside it", path, owner, MarkerName)
}

// checkEmpty fails, wrapping ErrNotEmpty, when the directory fd holds an
// entry; a marker is no entry when marked (it names no one). Only the first
// two entries are read, however many there are. path is for errors.
func checkEmpty(fd int, path string, marked bool) error {
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return pathError("open", path, err)
	}
	f := os.NewFile(uintptr(dup), path)
	defer f.Close()
	names, err := f.Readdirnames(2)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	for _, name := range names {
		if name != MarkerName || !marked {
			return fmt.Errorf("%s exists and holds %q: %w", path, name, ErrNotEmpty)
		}
	}
	return nil
}

// Unmark removes the marker of base/rel when it names owner, or names no
// one (a crash cut its writing short): the directory's volume exists now.
// A missing directory or marker is not an error; another owner's marker
// is left as it is.
func Unmark(base, rel, owner string) error {
	fd, err := openMarked(base, rel)
	if err != nil || fd < 0 {
		return err
	}
	defer unix.Close(fd)
	got, present, err := readMarker(fd)
	switch {
	case err != nil:
		return fmt.Errorf("unmark %s: %w", rel, pathError("read marker", filepath.Join(base, rel, MarkerName), err))
	case !present || (got != owner && got != ""):
		return nil
	}
	if err := unix.Unlinkat(fd, MarkerName, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmark %s: %w", rel, pathError("unlink", filepath.Join(base, rel, MarkerName), err))
	}
	return nil
}

// RemoveMarked takes back a directory CreateMarked made for owner whose
// volume will never exist. It removes base/rel only when its marker names
// owner and the marker is all it holds, with unlink and rmdir: never
// anything below it, so nothing written there after it was made is ever
// lost, even by a writer racing with it (rmdir fails on a directory that
// is not empty). Otherwise it keeps the directory and says why.
func RemoveMarked(base, rel, owner string) (Outcome, error) {
	if owner == "" {
		return KeptNotMade, fmt.Errorf("remove %s: no owner given", rel)
	}
	fd, err := openMarked(base, rel)
	if err != nil || fd < 0 {
		return AlreadyGone, err
	}
	defer unix.Close(fd)
	path := filepath.Join(base, rel)
	got, _, err := readMarker(fd)
	switch {
	case err != nil:
		return KeptNotMade, fmt.Errorf("remove %s: %w", rel, pathError("read marker", filepath.Join(path, MarkerName), err))
	case got != owner:
		return KeptNotMade, nil
	}
	if err := unix.Unlinkat(fd, MarkerName, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return KeptNotMade, fmt.Errorf("remove %s: %w", rel, pathError("unlink", filepath.Join(path, MarkerName), err))
	}
	return rmdirBelow(base, rel)
}

// rmdirBelow removes the empty directory base/rel, resolved beneath base.
func rmdirBelow(base, rel string) (Outcome, error) {
	parent, name, err := openParent(base, rel)
	if err != nil {
		return KeptNotMade, fmt.Errorf("remove %s: %w", rel, err)
	}
	defer unix.Close(parent)
	err = unix.Unlinkat(parent, name, unix.AT_REMOVEDIR)
	switch {
	case errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST):
		return KeptNotEmpty, nil
	case errors.Is(err, unix.ENOENT):
		return AlreadyGone, nil
	case err != nil:
		return KeptNotMade, fmt.Errorf("remove %s: %w", rel, pathError("rmdir", filepath.Join(base, rel), err))
	}
	if err := unix.Fsync(parent); err != nil {
		return Removed, fmt.Errorf("remove %s: %w", rel, pathError("fsync", filepath.Dir(filepath.Join(base, rel)), err))
	}
	return Removed, nil
}

// openMarked opens the directory base/rel beneath base; -1 and no error
// when it is missing. Something other than a directory there, or a
// symlink or mount point on the way, is an error.
func openMarked(base, rel string) (int, error) {
	if err := ValidRel(rel); err != nil {
		return -1, fmt.Errorf("a directory in %s: %w", base, err)
	}
	parent, name, err := openParent(base, rel)
	if errors.Is(err, unix.ENOENT) && !errors.Is(err, errBase) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", rel, err)
	}
	defer unix.Close(parent)
	fd, err := openBelow(parent, name)
	switch {
	case errors.Is(err, unix.ENOENT):
		return -1, nil
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
		if st, serr := lstatAt(parent, name); serr == nil {
			err = errNotDir(filepath.Join(base, rel), st)
		}
	}
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", rel, pathError("open", filepath.Join(base, rel), err))
	}
	return fd, nil
}

// writeMarker creates MarkerName in the directory fd, holding owner, and
// makes it and its entry durable.
func writeMarker(dirfd int, owner string) error {
	fd, err := unix.Openat(dirfd, MarkerName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	data := []byte(owner + "\n")
	n, err := unix.Write(fd, data)
	if err == nil && n != len(data) {
		err = unix.EIO
	}
	if err == nil {
		err = unix.Fsync(fd)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Fsync(dirfd)
	}
	return err
}

// readMarker reads the owner MarkerName in the directory fd names, and
// whether there is one. A marker that is not a regular file (a symlink, a
// FIFO) is an error, never followed or waited on.
func readMarker(dirfd int) (string, bool, error) {
	fd, err := unix.Openat(dirfd, MarkerName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return "", false, nil
	case errors.Is(err, unix.ELOOP):
		return "", true, errors.New("is a symlink")
	case err != nil:
		return "", true, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", true, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", true, errors.New("is not a regular file")
	}
	buf := make([]byte, maxMarker)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return "", true, err
	}
	return string(bytes.TrimSpace(buf[:n])), true, nil
}
