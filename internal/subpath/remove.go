package subpath

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/mount"
)

// maxStacked bounds the unmounts of one target: mounts stacked on it by
// preparations that raced (which one lock per volume prevents) or by
// someone else.
const maxStacked = 8

// RemovePod takes off and removes every subPath mount of pod uid, and the
// directories above them: what teardown does before the volumes go, and
// what clears the leftovers of a crash. Each target is unmounted (until
// it is no mount point, told by mount ID), then removed only when it is
// the empty directory or file the agent made: nothing is ever removed
// through a mount, and nothing else is removed at all.
func (p Preparer) RemovePod(ctx context.Context, uid types.UID) error {
	dir := p.Dir(uid)
	vols, err := layout.ReadDirs(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, v := range vols {
		errs = append(errs, p.removeVolume(ctx, filepath.Join(dir, v), func(string, int) bool { return false }))
	}
	errs = append(errs, mount.RemoveEmptyDir(dir))
	return errors.Join(errs...)
}

// removeUnwanted removes the subPath mounts of volume that wants does not
// list (or lists with a Problem).
func (p Preparer) removeUnwanted(ctx context.Context, uid types.UID, volume string, wants []Want) error {
	keep := func(container string, index int) bool {
		for _, w := range wants {
			if w.Problem == "" && w.Container == container && w.Index == index {
				return true
			}
		}
		return false
	}
	return p.removeVolume(ctx, filepath.Join(p.Dir(uid), volume), keep)
}

// removeVolume removes the targets below one volume's directory that
// keep does not keep, and the directories left empty.
func (p Preparer) removeVolume(ctx context.Context, dir string, keep func(string, int) bool) error {
	containers, err := layout.ReadDirs(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range containers {
		cdir := filepath.Join(dir, c)
		entries, err := os.ReadDir(cdir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		kept := 0
		for _, e := range entries {
			i, err := strconv.Atoi(e.Name())
			if err == nil && keep(c, i) {
				kept++
				continue
			}
			errs = append(errs, p.removeTarget(ctx, filepath.Join(cdir, e.Name())))
		}
		if kept == 0 {
			errs = append(errs, mount.RemoveEmptyDir(cdir))
		}
	}
	if !hasSubdirs(dir) {
		errs = append(errs, mount.RemoveEmptyDir(dir))
	}
	return errors.Join(errs...)
}

// removeTarget unmounts target until it is no mount point, then removes
// it when it is an empty directory or an empty file (a mount point the
// agent made); anything else stays, with an error.
func (p Preparer) removeTarget(ctx context.Context, target string) error {
	for range maxStacked {
		mounted, err := p.Mounter.IsMountPoint(ctx, target)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("check mount point %s: %w", target, err)
		}
		if !mounted {
			return removeEmpty(target)
		}
		if err := p.Mounter.Unmount(ctx, target); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s: still a mount point after %d unmounts", target, maxStacked)
}

// removeEmpty removes a mount point that is no longer mounted: an empty
// directory, or an empty regular file.
func removeEmpty(target string) error {
	var st unix.Stat_t
	if err := unix.Lstat(target, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return &os.PathError{Op: "lstat", Path: target, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return mount.RemoveEmptyDir(target)
	case st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == 0:
		if err := unix.Unlink(target); err != nil && !errors.Is(err, unix.ENOENT) {
			return &os.PathError{Op: "unlink", Path: target, Err: err}
		}
		return nil
	}
	return fmt.Errorf("%s is not a mount point the agent made: leaving it", target)
}

func hasSubdirs(dir string) bool {
	names, err := layout.ReadDirs(dir)
	return err != nil || len(names) > 0
}
