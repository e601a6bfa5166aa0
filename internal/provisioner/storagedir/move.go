package storagedir

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Move renames the directory base/from to base/to, both resolved beneath
// base without symlinks or mount crossings, in the same parent directory.
// It never replaces anything at to: an existing to is an error wrapping
// unix.EEXIST, a missing from one wrapping unix.ENOENT, and something
// other than a directory at from is an error and is left as it is. The
// rename is made durable before Move returns.
func Move(base, from, to string) error {
	for _, rel := range []string{from, to} {
		if err := ValidRel(rel); err != nil {
			return fmt.Errorf("move a directory in %s: %w", base, err)
		}
	}
	if filepath.Dir(from) != filepath.Dir(to) {
		return fmt.Errorf("move %s to %s: want the same parent directory", from, to)
	}
	parent, name, err := openParent(base, from)
	if err != nil {
		return fmt.Errorf("move %s: %w", from, err)
	}
	defer unix.Close(parent)
	path := filepath.Join(base, from)
	st, err := lstatAt(parent, name)
	switch {
	case err != nil:
		return fmt.Errorf("move %s: %w", from, pathError("stat", path, err))
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("move %s: %w", from, errNotDir(path, st))
	}
	err = renameNoReplace(parent, name, filepath.Base(to))
	if err == nil {
		err = unix.Fsync(parent)
	}
	if err != nil {
		return fmt.Errorf("move %s: %w", from, pathError("rename", path, fmt.Errorf("to %s: %w", filepath.Base(to), err)))
	}
	return nil
}

// Exists reports whether the directory base/rel exists, resolved beneath
// base. A missing base is an error (a disk that is not mounted is not an
// empty one), and so is anything but a directory at base/rel.
func Exists(base, rel string) (bool, error) {
	if err := ValidRel(rel); err != nil {
		return false, fmt.Errorf("look up a directory in %s: %w", base, err)
	}
	ok, err := isDirBelow(base, rel)
	return ok, prefixed("look up "+rel, err)
}
