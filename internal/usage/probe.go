package usage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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

	// probes counts the volumes probed (tests).
	probes atomic.Int64

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
func (t *mountTable) probe(path string) (probed, error) {
	t.probes.Add(1)
	const flags = unix.AT_SYMLINK_NOFOLLOW | unix.AT_STATX_DONT_SYNC
	var st, parent unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, flags, dirMask|unix.STATX_SUBVOL, &st); err != nil {
		return probed{}, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return probed{}, fmt.Errorf("volume path %s is not a directory", path)
	}
	if err := unix.Statx(unix.AT_FDCWD, filepath.Dir(path), flags, unix.STATX_MNT_ID, &parent); err != nil {
		return probed{}, &os.PathError{Op: "statx", Path: filepath.Dir(path), Err: err}
	}
	m, err := t.lookup(st.Mnt_id)
	if err != nil {
		return probed{}, err
	}
	p := probed{dir: dirOf(&st)}
	mountPoint := st.Mnt_id != parent.Mnt_id
	switch {
	case mountPoint && (m.root == "/" || network(m.fsType)):
		p.how = byStatfs
	case network(m.fsType):
		p.how = notAtAll
	case m.fsType == "btrfs" && st.Ino == btrfs.SubvolumeIno:
		p.how = byQuota
		if st.Mask&unix.STATX_SUBVOL != 0 {
			p.subvol = st.Subvol
		}
	default:
		p.how = byWalk
	}
	return p, nil
}

// probed is how a volume is measured, and what it was decided for.
type probed struct {
	how    how
	subvol uint64 // the subvolume's ID, for byQuota; 0 when not known
	dir    dirID  // the volume's directory when probed
	// fs is the file system a byStatfs volume's first statfs read; zero
	// until then, and for a file system that gives no ID.
	fs fsID
}

// dirID tells a directory: the mount it is reached through, its device
// and inode. While they stay the same, so does how the volume is measured:
// the same mount has the same file system type and root, a mount put on
// the directory or its parent would change its mount ID, and a directory
// made anew its inode.
type dirID struct {
	mnt, devMajor, devMinor, ino uint64
}

// dirMask is what statx must say for a dirID.
const dirMask = unix.STATX_TYPE | unix.STATX_INO | unix.STATX_MNT_ID

func dirOf(st *unix.Statx_t) dirID {
	return dirID{mnt: st.Mnt_id, devMajor: uint64(st.Dev_major), devMinor: uint64(st.Dev_minor), ino: st.Ino}
}

// statDir is the dirID of the directory at path.
func statDir(path string) (dirID, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, dirMask, &st); err != nil {
		return dirID{}, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return dirID{}, fmt.Errorf("volume path %s is not a directory", path)
	}
	return dirOf(&st), nil
}

// probe says how the volume of s at path is measured, on the worker w.
// A volume is probed once while it stays as it was (its mount and file
// system do not change while it is set up): a volume that is its own
// file system is then measured by statfs alone, whose file system ID
// shows whether it is still the one probed; any other by one statx
// showing that its directory is still the one probed. Where either
// differs, or a measurement failed (forget), it is probed again. cached
// says the answer was not probed now, for a statfs to confirm.
func (u *Usage) probe(w *worker, s *slot, path string) (p probed, cached bool, err error) {
	u.mu.Lock()
	c := s.probe
	u.mu.Unlock()
	if c != nil && c.how == byStatfs && c.fs != (fsID{}) {
		return *c, true, nil
	}
	if c != nil {
		u.dirChecks.Add(1)
		id, err := callOn(w, s, u.cfg.CallTimeout, nil, func(context.Context) (dirID, error) { return statDir(path) })
		if err != nil {
			return probed{}, false, err
		}
		if id == c.dir {
			return *c, true, nil
		}
	}
	p, err = callOn(w, s, u.cfg.CallTimeout, nil, func(context.Context) (probed, error) { return u.mounts.probe(path) })
	if err != nil {
		return probed{}, false, err
	}
	u.mu.Lock()
	s.probe = &p
	u.mu.Unlock()
	return p, false, nil
}

// sameFS reports whether the file system id of a statfs of s's volume is
// the one its first statfs read, recording it at the first.
func (u *Usage) sameFS(s *slot, id fsID) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case s.probe == nil:
		return true
	case s.probe.fs == (fsID{}):
		s.probe.fs = id
		return true
	}
	return s.probe.fs == id
}

// forget drops how s's volume is measured: it is probed again at its
// next measurement.
func (u *Usage) forget(s *slot) {
	u.mu.Lock()
	defer u.mu.Unlock()
	s.probe = nil
}
