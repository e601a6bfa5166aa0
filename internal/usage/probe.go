package usage

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/btrfs"
)

// how says how a volume is measured.
type how int

const (
	byWalk   how = iota // a plain directory
	byStatfs            // its own file system: a mount point showing the root of its file system
	byQuota             // a btrfs subvolume, measured by its qgroup when it has a limit
	notAtAll            // a directory on network storage that is not its own mount
)

// mountInfo is what the mount table says of one mount.
type mountInfo struct {
	root, fsType string
}

// mountTable caches the kernel's mount table by mount ID. A mount ID names
// one mount for its life, so an entry stays right; the table is read again
// when an ID is not in it, and at most once per maxAge otherwise.
type mountTable struct {
	maxAge time.Duration
	now    func() time.Time

	mu   sync.Mutex
	read time.Time            // guarded by mu
	byID map[uint64]mountInfo // guarded by mu
}

// lookup returns what the table says of mount id.
func (t *mountTable) lookup(id uint64) (mountInfo, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m, ok := t.byID[id]; ok && t.now().Sub(t.read) < t.maxAge {
		return m, nil
	}
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return mountInfo{}, fmt.Errorf("read mount table: %w", err)
	}
	t.byID, t.read = make(map[uint64]mountInfo, len(infos)), t.now()
	for _, i := range infos {
		t.byID[uint64(i.ID)] = mountInfo{root: i.Root, fsType: i.FSType} //nolint:gosec // G115: mount IDs are positive
	}
	m, ok := t.byID[id]
	if !ok {
		return mountInfo{}, fmt.Errorf("mount ID %d is not in the mount table", id)
	}
	return m, nil
}

// networkTypes are file systems on another machine: never walked.
var networkTypes = map[string]bool{"nfs": true, "nfs4": true, "cifs": true, "smb3": true, "smbfs": true, "ceph": true,
	"glusterfs": true, "9p": true, "afs": true, "lustre": true, "gpfs": true, "beegfs": true, "ocfs2": true, "gfs2": true}

// network reports whether a file system type is network storage; FUSE
// file systems count, since most of them are (sshfs, s3fs).
func network(fsType string) bool {
	return networkTypes[fsType] || fsType == "fuse" || strings.HasPrefix(fsType, "fuse.")
}

// probe decides how the volume at path is measured, from cached
// attributes (statx does not ask a network file system) and the mount
// table: statfs for a mount point that shows its file system's root, or
// any network mount; nothing for a directory inside network storage; its
// qgroup for a btrfs subvolume's root directory, seen directly or through
// a bind mount of it (the inode is the subvolume's either way), with the
// subvolume's ID when the kernel gives it (STATX_SUBVOL, Linux 6.10), 0
// otherwise; a walk otherwise (a plain directory, or a bind mount of one).
func (t *mountTable) probe(path string) (how, uint64, error) {
	const flags = unix.AT_SYMLINK_NOFOLLOW | unix.AT_STATX_DONT_SYNC
	var st, parent unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, flags, unix.STATX_TYPE|unix.STATX_INO|unix.STATX_MNT_ID|unix.STATX_SUBVOL, &st); err != nil {
		return 0, 0, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return 0, 0, fmt.Errorf("volume path %s is not a directory", path)
	}
	if err := unix.Statx(unix.AT_FDCWD, filepath.Dir(path), flags, unix.STATX_MNT_ID, &parent); err != nil {
		return 0, 0, &os.PathError{Op: "statx", Path: filepath.Dir(path), Err: err}
	}
	m, err := t.lookup(st.Mnt_id)
	if err != nil {
		return 0, 0, err
	}
	mountPoint := st.Mnt_id != parent.Mnt_id
	switch {
	case mountPoint && (m.root == "/" || network(m.fsType)):
		return byStatfs, 0, nil
	case network(m.fsType):
		return notAtAll, 0, nil
	case m.fsType == "btrfs" && st.Ino == btrfs.SubvolumeIno:
		var id uint64
		if st.Mask&unix.STATX_SUBVOL != 0 {
			id = st.Subvol
		}
		return byQuota, id, nil
	}
	return byWalk, 0, nil
}
