package local

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
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
// when dir already looks done.
//
// The volume belongs to the pod, which may change it while the walk runs,
// so the walk never acts on a path (see walker):
//
//   - Every entry is opened by its name relative to its directory's
//     descriptor, with no symlink followed and no mount crossed, and is
//     changed through that descriptor after its type has been read from
//     it. A symlink gets the group itself and is never followed or
//     chmodded; a mount point below dir, found by mount ID (a bind mount
//     of the same file system has the same device), is left alone.
//   - A file with more than one link is changed only once the walk has
//     found all its links in the volume: a hard link to a file outside
//     does not give the pod that file. It returns how many were left so.
//   - It keeps at most three descriptors open (the directory it is in,
//     an entry, a subdirectory opened to go down), however deep the tree.
//
// dir must be an absolute path without symlinks. The walk stops when ctx
// ends. report, when not nil, is called every progressEvery while the
// walk runs, and once at its end if it ran that long, with the entries
// visited so far.
func setOwnership(ctx context.Context, dir string, gid int64, policy v1.PodFSGroupChangePolicy, report func(entries int, elapsed time.Duration, done bool)) (linkedOutside int, err error) {
	top, err := openat2(unix.AT_FDCWD, dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", dir, err)
	}
	st, err := statFd(top)
	if err != nil {
		unix.Close(top)
		return 0, fmt.Errorf("stat %s: %w", dir, err)
	}
	if policy == v1.FSGroupChangeOnRootMismatch && ownedBy(st, gid) {
		unix.Close(top)
		return 0, nil
	}
	w := &walker{ctx: ctx, gid: int(gid), mnt: st.Mnt_id, report: report, start: time.Now(), next: progressEvery,
		links: map[uint64]uint32{}, buf: make([]byte, 32<<10)}
	if report != nil {
		defer func() {
			if elapsed := time.Since(w.start); elapsed >= progressEvery {
				report(w.entries, elapsed, true)
			}
		}()
	}
	if err := w.run(top, st); err != nil {
		return 0, fmt.Errorf("in %s: %w", dir, err)
	}
	return len(w.links), nil
}

// ownedBy reports whether the volume's top directory already belongs to
// gid with the modes set.
func ownedBy(st unix.Statx_t, gid int64) bool {
	want := uint16(groupRW | groupExec | unix.S_ISGID)
	return int64(st.Gid) == gid && st.Mode&want == want
}

// walker changes one volume, depth first, keeping only the directory it
// is in open: it goes down by opening a child from that directory's
// descriptor and back up through "..", checking that ".." is the
// directory it came from. What each directory still has to visit is kept
// as names, read once when the walk enters it.
type walker struct {
	ctx     context.Context
	gid     int
	mnt     uint64 // the volume's mount ID
	report  func(int, time.Duration, bool)
	start   time.Time
	next    time.Duration // elapsed time of the next report
	entries int
	// links counts, by inode, the links found so far of files with more
	// than one that have not been changed yet.
	links map[uint64]uint32
	buf   []byte // for readNames
}

// level is a directory the walk is in.
type level struct {
	name string // in its parent; "" for the top
	ino  uint64
	todo []string // entries not visited yet
}

// run changes the directory top (st) and everything below it; it closes
// top.
func (w *walker) run(top int, st unix.Statx_t) error {
	cur := top // the one directory held open between steps
	defer func() { unix.Close(cur) }()
	w.count()
	if err := w.change(cur, st); err != nil {
		return err
	}
	names, err := readNames(cur, w.buf)
	if err != nil {
		return fmt.Errorf("read directory: %w", err)
	}
	path := []level{{ino: st.Ino, todo: names}}
	for {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		here := &path[len(path)-1]
		if len(here.todo) == 0 {
			if len(path) == 1 {
				return nil
			}
			up, err := openParent(cur, path[len(path)-2].ino, w.mnt)
			if err != nil {
				return fmt.Errorf("%s: back up: %w", where(path, ""), err)
			}
			unix.Close(cur)
			cur, path = up, path[:len(path)-1]
			continue
		}
		name := here.todo[0]
		here.todo = here.todo[1:]
		child, st, err := w.visit(cur, name)
		if err != nil {
			return fmt.Errorf("%s: %w", where(path, name), err)
		}
		if child < 0 {
			continue
		}
		names, err := readNames(child, w.buf)
		if err != nil {
			unix.Close(child)
			if errors.Is(err, unix.ENOENT) {
				continue // removed since it was opened
			}
			return fmt.Errorf("%s: read directory: %w", where(path, name), err)
		}
		unix.Close(cur)
		cur, path = child, append(path, level{name: name, ino: st.Ino, todo: names})
	}
}

// visit changes the entry name of the directory dirfd. For a directory to
// go down into, it returns the directory opened for reading, else -1.
func (w *walker) visit(dirfd int, name string) (int, unix.Statx_t, error) {
	w.count()
	fd, err := openEntry(dirfd, name)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EXDEV):
		return -1, unix.Statx_t{}, nil // gone since it was listed; a mount point: not ours
	case err != nil:
		return -1, unix.Statx_t{}, fmt.Errorf("open: %w", err)
	}
	defer unix.Close(fd)
	st, err := statFd(fd)
	switch {
	case err != nil:
		return -1, st, fmt.Errorf("stat: %w", err)
	case st.Mnt_id != w.mnt:
		return -1, st, nil // another mount, should RESOLVE_NO_XDEV have let one through
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if st.Nlink > 1 && !w.lastLink(st.Ino, st.Nlink) {
			return -1, st, nil
		}
		return -1, st, w.change(fd, st)
	}
	if err := w.change(fd, st); err != nil {
		return -1, st, err
	}
	child, err := openDirAgain(fd, st)
	if err != nil {
		return -1, st, fmt.Errorf("open directory: %w", err)
	}
	return child, st, nil
}

// lastLink counts one more link of the file ino found in the volume and
// reports whether the walk has now found all nlink of them.
func (w *walker) lastLink(ino uint64, nlink uint32) bool {
	w.links[ino]++
	if w.links[ino] < nlink {
		return false
	}
	delete(w.links, ino)
	return true
}

// change gives what fd refers to (st) the group, and the modes unless it
// is a symlink.
func (w *walker) change(fd int, st unix.Statx_t) error {
	typ := st.Mode & unix.S_IFMT
	if int(st.Gid) != w.gid {
		if err := chownFd(fd, w.gid); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
		if typ != unix.S_IFDIR && st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			// The kernel may have cleared them; keep what it left.
			var err error
			if st, err = statFd(fd); err != nil {
				return err
			}
		}
	}
	if typ == unix.S_IFLNK {
		return nil // Linux has no modes for symlinks
	}
	mode := uint32(st.Mode) & 0o7777
	want := mode | groupRW
	if typ == unix.S_IFDIR {
		want |= groupExec | unix.S_ISGID
	}
	if want == mode {
		return nil
	}
	if err := chmodFd(fd, want); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return nil
}

// count counts one entry and reports progress when it is time to.
func (w *walker) count() {
	w.entries++
	if w.report == nil {
		return
	}
	if elapsed := time.Since(w.start); elapsed >= w.next {
		w.report(w.entries, elapsed, false)
		w.next += progressEvery
	}
}

// where names the entry name of the directory at the end of path, by its
// path in the volume; below 16 levels by its depth and last names only.
func where(path []level, name string) string {
	names := make([]string, 0, len(path))
	for _, l := range path[1:] {
		names = append(names, l.name)
	}
	if name != "" {
		names = append(names, name)
	}
	if len(names) <= 16 {
		return filepath.Join(names...)
	}
	return fmt.Sprintf("at depth %d: .../%s", len(names), strings.Join(names[len(names)-8:], "/"))
}
