package local

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// progressEvery is how often a long ownership change logs its progress (a
// variable for tests).
var progressEvery = 10 * time.Second

// ownershipReporter logs the progress of the ownership change of the
// volume of spec, or returns nil without a logger.
func ownershipReporter(log *zap.Logger, spec *volume.Spec, gid int64) func(int, time.Duration, bool) {
	if log == nil {
		return nil
	}
	log = log.With(zap.String("pod", spec.Pod.Namespace+"/"+spec.Pod.Name), zap.String("volume", spec.Volume.Name), zap.Int64("fsGroup", gid))
	return func(entries int, elapsed time.Duration, done bool) {
		msg := "fsGroup ownership change in progress"
		if done {
			msg = "fsGroup ownership change done"
		}
		log.Info(msg, zap.Int("entries", entries), zap.Duration("elapsed", elapsed.Round(time.Second)))
	}
}

// Modes the kubelet adds for an fsGroup on a writable volume.
const (
	groupRW   = 0o660 // files and directories: owner and group read and write
	groupExec = 0o110 // directories: owner and group search
)

// setOwnership gives the group gid the volume at dir, as the kubelet does
// for a writable volume with an fsGroup: every file and directory belongs
// to the group and is group read-write, and directories are setgid so new
// files inherit the group. With policy OnRootMismatch nothing is walked
// when dir already looks done. Symlinks are re-owned, never followed, and
// the walk never crosses into another mount.
//
// report, when not nil, is called every progressEvery while the walk runs,
// and once at its end if it ran that long, with the entries changed so far.
func setOwnership(dir string, gid int64, policy v1.PodFSGroupChangePolicy, report func(entries int, elapsed time.Duration, done bool)) error {
	if policy == v1.FSGroupChangeOnRootMismatch && ownedBy(dir, gid) {
		return nil
	}
	top, err := mountID(dir)
	if err != nil {
		return err
	}
	start, next, entries := time.Now(), progressEvery, 0
	if report != nil {
		defer func() {
			if elapsed := time.Since(start); elapsed >= progressEvery {
				report(entries, elapsed, true)
			}
		}()
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		entries++
		if elapsed := time.Since(start); report != nil && elapsed >= next {
			report(entries, elapsed, false)
			next += progressEvery
		}
		if err != nil {
			return err
		}
		if d.IsDir() && p != dir {
			id, err := mountID(p)
			if err != nil {
				return err
			}
			if id != top {
				return fs.SkipDir // a mount below: not ours to change
			}
		}
		return ownOne(p, d, gid)
	})
}

// ownOne gives one entry the group and the modes.
func ownOne(p string, d fs.DirEntry, gid int64) error {
	if err := os.Lchown(p, -1, int(gid)); err != nil {
		return fmt.Errorf("chown %s: %w", p, err)
	}
	if d.Type()&fs.ModeSymlink != 0 {
		return nil // chmod would follow it
	}
	info, err := d.Info()
	if err != nil {
		return err
	}
	mode := info.Mode() | groupRW
	if d.IsDir() {
		mode |= groupExec | fs.ModeSetgid
	}
	if mode == info.Mode() {
		return nil
	}
	if err := os.Chmod(p, mode); err != nil {
		return fmt.Errorf("chmod %s: %w", p, err)
	}
	return nil
}

// ownedBy reports whether dir already belongs to gid with the modes set.
func ownedBy(dir string, gid int64) bool {
	var st unix.Stat_t
	if unix.Lstat(dir, &st) != nil {
		return false
	}
	want := uint32(groupRW | groupExec | unix.S_ISGID)
	return int64(st.Gid) == gid && st.Mode&want == want
}

// mountID returns the mount ID of p, without following a symlink.
func mountID(p string) (uint64, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", p, err)
	}
	return st.Mnt_id, nil
}
