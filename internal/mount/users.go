package mount

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// MountsOf lists the mount points that show dir, or a directory below it,
// from another place: the bind mounts of the tree that a pod's volume is,
// for a caller about to move or delete that tree. Mounts *below* dir are not
// listed (RemoveAll refuses those on its own).
//
// A bind mount shows a directory of a file system under another path; the
// kernel's mount table says which one by the mount's root (the path of
// that directory within its file system) and names the file system by its
// device number: the only name for a superblock the table has. Mounts
// themselves are still told apart by mount ID: dir's own mount is found by
// the mount ID of statx, never by device number. A missing dir is shown by
// nothing.
func MountsOf(ctx context.Context, dir string) ([]string, error) {
	return Bounded(ctx, func() ([]string, error) { return mountsOf(filepath.Clean(dir)) })
}

func mountsOf(dir string) ([]string, error) {
	st, err := statAt(unix.AT_FDCWD, dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, &os.PathError{Op: "statx", Path: dir, Err: err}
	}
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	var own *mountinfo.Info
	for _, info := range infos {
		if uint64(info.ID) == st.Mnt_id { //nolint:gosec // G115: mount IDs are non-negative
			own = info
		}
	}
	if own == nil {
		return nil, fmt.Errorf("%s: its mount (ID %d) is not in the mount table", dir, st.Mnt_id)
	}
	rel, err := filepath.Rel(own.Mountpoint, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, fmt.Errorf("%s is not below its mount point %s", dir, own.Mountpoint)
	}
	inFS := filepath.Join(own.Root, rel) // dir's path within its file system
	var users []string
	for _, info := range infos {
		if info.ID == own.ID || info.Major != own.Major || info.Minor != own.Minor {
			continue
		}
		if info.Root == inFS || strings.HasPrefix(info.Root, inFS+"/") || inFS == "/" {
			users = append(users, info.Mountpoint)
		}
	}
	return users, nil
}
