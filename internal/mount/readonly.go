package mount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// ReadOnlyMounts reads the kernel's mount table once and reports, for each
// of dirs that is a mount point, whether the mount there is read-only: its
// own ro flag, which mount(2) with MS_RDONLY, a read-only bind remount or
// mount(8) -o ro sets. A writable mount of a file system that is
// read-only underneath is not read-only here: the flag is what the
// mount's maker asked for. A dir that is missing or not a mount point is
// not listed. It is for rebuilding what is known about volumes mounted
// before a restart.
//
// A mount is found by mount IDs, not by its path alone: it is the mount on
// dir whose parent is the mount of dir's parent directory (the mount ID of
// statx), or one stacked on that mount on the same point, the topmost
// being the one a lookup of dir reaches. Nothing is asked of the file
// systems mounted at dirs, so a dead NFS server cannot hang it.
func ReadOnlyMounts(ctx context.Context, dirs []string) (map[string]bool, error) {
	return Bounded(ctx, func() (map[string]bool, error) { return readOnlyMounts(dirs) })
}

func readOnlyMounts(dirs []string) (map[string]bool, error) {
	wanted := map[string]bool{}
	for _, dir := range dirs {
		wanted[filepath.Clean(dir)] = true
	}
	infos, err := mountinfo.GetMounts(func(info *mountinfo.Info) (bool, bool) { return !wanted[info.Mountpoint], false })
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	byPoint := map[string][]*mountinfo.Info{}
	for _, info := range infos {
		byPoint[info.Mountpoint] = append(byPoint[info.Mountpoint], info)
	}
	out := make(map[string]bool, len(byPoint))
	for dir, stack := range byPoint {
		top, err := topMount(dir, stack)
		if err != nil {
			return nil, err
		}
		if top != nil {
			out[dir] = slices.Contains(strings.Split(top.Options, ","), "ro")
		}
	}
	return out, nil
}

// topMount returns, of the mounts of the table on dir, the one a lookup of
// dir reaches, or nil when none is mounted on dir's parent directory as
// this process sees it.
func topMount(dir string, onDir []*mountinfo.Info) (*mountinfo.Info, error) {
	st, err := statAt(unix.AT_FDCWD, filepath.Dir(dir))
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, nil
	case err != nil:
		return nil, &os.PathError{Op: "statx", Path: filepath.Dir(dir), Err: err}
	}
	var top *mountinfo.Info
	parent := st.Mnt_id
	for {
		i := slices.IndexFunc(onDir, func(info *mountinfo.Info) bool { return uint64(info.Parent) == parent }) //nolint:gosec // G115: mount IDs are non-negative
		if i < 0 {
			return top, nil
		}
		top = onDir[i]
		parent = uint64(top.ID) //nolint:gosec // G115: mount IDs are non-negative
		onDir = slices.Delete(onDir, i, i+1)
	}
}
