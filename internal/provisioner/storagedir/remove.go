package storagedir

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/volume-agent/volume-agent/internal/mount"
	"golang.org/x/sys/unix"
)

// Remove removes the directory base/rel and everything below it with
// mount.RemoveAll: it refuses when a mount point is at or below it, never
// crosses a mount and never follows a symlink. A missing directory is not
// an error; a missing base is. A file or a symlink at base/rel, or a
// symlink on the way to it, is an error and is left as it is.
func Remove(ctx context.Context, m mount.Mounter, base, rel string) error {
	if err := ValidRel(rel); err != nil {
		return fmt.Errorf("remove a directory in %s: %w", base, err)
	}
	path := filepath.Join(base, rel)
	exists, err := isDirBelow(base, rel)
	if err != nil || !exists {
		return prefixed("remove "+rel, err)
	}
	return mount.RemoveAll(ctx, m, path)
}

// isDirBelow reports whether base/rel is a directory, resolved beneath
// base, and fails when something else is there.
func isDirBelow(base, rel string) (bool, error) {
	parent, name, err := openParent(base, rel)
	if errors.Is(err, unix.ENOENT) && !errors.Is(err, errBase) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(parent)
	st, err := lstatAt(parent, name)
	switch {
	case errors.Is(err, unix.ENOENT):
		return false, nil
	case err != nil:
		return false, pathError("stat", filepath.Join(base, rel), err)
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return false, errNotDir(filepath.Join(base, rel), st)
	}
	return true, nil
}

// prefixed wraps a non-nil err with what.
func prefixed(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}
