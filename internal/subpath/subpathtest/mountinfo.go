// Package subpathtest checks subPath mounts for tests, from the kernel's
// mount table: what a mount shows, and that it lies inside a volume.
package subpathtest

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// ErrNotMounted: the target is no mount point (any more).
var ErrNotMounted = errors.New("no mount point")

// Inside returns an error unless the mount on target shows a file or
// directory inside dir: on dir's file system, at a path below the one dir
// has on it. It reads the mount table (test code: the agent itself never
// does for this).
func Inside(target, dir string) error {
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(target))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", target, ErrNotMounted)
	}
	if err != nil {
		return err
	}
	return inside(filepath.Join(parent, filepath.Base(target)), dir)
}

func inside(target, dir string) error {
	mounts, err := mountinfo.GetMounts(nil)
	if err != nil {
		return err
	}
	var got, holder *mountinfo.Info
	for _, m := range mounts {
		if m.Mountpoint == target {
			got = m // the last one mounted there is the one shown
		}
		if under(dir, m.Mountpoint) && (holder == nil || len(m.Mountpoint) >= len(holder.Mountpoint)) {
			holder = m
		}
	}
	if got == nil {
		return fmt.Errorf("%s: %w", target, ErrNotMounted)
	}
	want := filepath.Join(holder.Root, strings.TrimPrefix(dir, holder.Mountpoint))
	if got.Major != holder.Major || got.Minor != holder.Minor || !under(got.Root, want) {
		return fmt.Errorf("the mount on %s shows %d:%d %s, outside the volume %s (%d:%d %s)",
			target, got.Major, got.Minor, got.Root, dir, holder.Major, holder.Minor, want)
	}
	return nil
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
