package mount

import (
	"context"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"os"
	"path/filepath"
	"time"
)

// rollbackTimeout bounds the undo of a failed operation: unmounting and
// removing what it made touches storage, which may hang like any other call.
const rollbackTimeout = 30 * time.Second

// RollbackContext returns the context in which to undo a failed operation
// that ran under ctx, and its cancel function. It keeps ctx's values but not
// its cancellation, since the operation may have failed because ctx ended and
// its undo must still run, and it ends after rollbackTimeout.
func RollbackContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
}

// EnsureMounted mounts m on dir unless dir is a mount point already, so
// that setting a volume up again after a restart never mounts twice.
// It reports whether it tried to mount: when it did and returns an error,
// the mount may still have happened (a deadline passed), so a caller that
// rolls back must unmount.
func EnsureMounted(ctx context.Context, mounter Mounter, m Mount, dir string) (bool, error) {
	mounted, err := mounter.IsMountPoint(ctx, dir)
	if err != nil {
		return false, fmt.Errorf("check mount point %s: %w", dir, err)
	}
	if mounted {
		return false, nil
	}
	return true, mounter.Mount(ctx, m, dir)
}

// MountOn mounts m on dir, which the caller has just created when created
// is true: a directory that did not exist a moment ago is no mount point, so
// nothing is asked first. Otherwise it is EnsureMounted. It reports, as
// EnsureMounted does, whether it tried to mount.
func MountOn(ctx context.Context, mounter Mounter, m Mount, dir string, created bool) (bool, error) {
	if !created {
		return EnsureMounted(ctx, mounter, m, dir)
	}
	return true, mounter.Mount(ctx, m, dir)
}

// RemoveDir tears a volume directory down: it unmounts dir if it is a mount
// point, then removes it as RemoveAll does (refusing to cross any other
// mount). A missing dir is not an error.
//
// One scan (MountsUnder) says both whether dir is a mount point and, when
// it is not, that no mount is below it: the walk that removes it follows
// without a second. A mount point once unmounted is most often the empty
// directory its set-up made before mounting (a tmpfs's): rmdir removes it
// without a walk, and it can never cross into a mount (on a mount point it
// fails with EBUSY). Only when it fails (the directory holds something, or
// a mount is still there) is what the unmount uncovered removed by
// RemoveAll, which scans it first.
func RemoveDir(ctx context.Context, mounter Mounter, dir string) error {
	dir = filepath.Clean(dir)
	mounts, err := mounter.MountsUnder(ctx, dir)
	if err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	switch {
	case len(mounts) == 0:
		if err := removeTree(ctx, dir); err != nil {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
		return nil
	case len(mounts) > 1 || filepath.Clean(mounts[0]) != dir:
		return fmt.Errorf("remove %s: %w: %v", dir, ErrMountPointsRemain, mounts)
	}
	if err := mounter.Unmount(ctx, dir); err != nil {
		return err
	}
	if err := unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return RemoveAll(ctx, mounter, dir)
}

// RemoveMountPoint tears down a volume whose data lives elsewhere (a
// bind mount of a local PV, an NFS export): it unmounts dir if it is a
// mount point, then removes dir only if it is empty. Nothing else is ever
// removed: what dir holds after the unmount is data, and stays (the error
// says so). A missing dir is not an error.
func RemoveMountPoint(ctx context.Context, mounter Mounter, dir string) error {
	exists, err := unmountIfMounted(ctx, mounter, dir)
	if !exists || err != nil {
		return err
	}
	return RemoveEmptyDir(dir)
}

// unmountIfMounted unmounts dir if it is a mount point, and reports
// whether dir exists.
func unmountIfMounted(ctx context.Context, mounter Mounter, dir string) (bool, error) {
	mounted, err := mounter.IsMountPoint(ctx, dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("check mount point %s: %w", dir, err)
	}
	if mounted {
		return true, mounter.Unmount(ctx, dir)
	}
	return true, nil
}

// RemoveEmptyDir removes dir if it is empty; a dir that holds anything is
// left as it is, with an error saying so. A missing dir is not an error.
func RemoveEmptyDir(dir string) error {
	err := unix.Rmdir(dir)
	switch {
	case err == nil || errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST):
		return fmt.Errorf("%s still holds files after its unmount: leaving them (nothing but the empty mount point is ever removed)", dir)
	}
	return &os.PathError{Op: "rmdir", Path: dir, Err: err}
}

// MakeDir creates dir with mode (and its parents, 0750) and reports whether
// dir is new. An existing dir is left as it is. It tries dir itself first:
// its parents usually exist (the pod's directories are made once, before
// its volumes are set up).
func MakeDir(dir string, mode os.FileMode) (bool, error) {
	err := os.Mkdir(dir, mode)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dir), 0o750); err != nil {
			return false, fmt.Errorf("create %s: %w", filepath.Dir(dir), err)
		}
		err = os.Mkdir(dir, mode)
	}
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("create %s: %w", dir, err)
	}
	return true, nil
}
