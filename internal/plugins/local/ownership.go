package local

import (
	"bytes"
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
//   - A file (anything but a directory) is changed only when the volume
//     holds its one link, which is proven against a pod that links and
//     unlinks as the walk goes (see changeFile): a hard link to a file
//     outside does not give the pod that file. A file with more than one
//     link is never changed, wherever its links are: no count the walk
//     can make tells them apart. It returns how many entries were left so.
//     A volume that is a whole file system (wholeFileSystem) has no links
//     outside it: there every file is changed, as the kubelet does.
//   - It keeps at most three descriptors open (the directory it is in,
//     an entry, a subdirectory opened to go down), however deep the tree;
//     the check of a file deeper than PATH_MAX takes two more for a moment.
//
// dir must be an absolute path without symlinks. The walk stops when ctx
// ends. report, when not nil, is called every progressEvery while the
// walk runs, and once at its end if it ran that long, with the entries
// visited so far.
func setOwnership(ctx context.Context, dir string, gid int64, policy v1.PodFSGroupChangePolicy, report func(entries int, elapsed time.Duration, done bool)) (multiLinked int, err error) {
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
	whole, err := wholeFileSystem(top, st)
	if err != nil {
		unix.Close(top)
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	w := &walker{ctx: ctx, gid: int(gid), mnt: st.Mnt_id, whole: whole, report: report, start: time.Now(), next: progressEvery,
		buf: make([]byte, 32<<10), linkBuf: make([]byte, unix.PathMax)}
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
	return w.multiLinked, nil
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
	ctx         context.Context
	gid         int
	mnt         uint64 // the volume's mount ID
	whole       bool   // the volume is a whole file system: every link is in it
	report      func(int, time.Duration, bool)
	start       time.Time
	next        time.Duration // elapsed time of the next report
	entries     int
	multiLinked int    // entries left alone: files with more than one link
	linkBuf     []byte // for stillLinked
	buf         []byte // for readNames
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
	hook("opened", dirfd, name)
	st, err := statFd(fd)
	switch {
	case err != nil:
		return -1, st, fmt.Errorf("stat: %w", err)
	case st.Mnt_id != w.mnt:
		return -1, st, nil // another mount, should RESOLVE_NO_XDEV have let one through
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		hook("stated", dirfd, name)
		return -1, st, w.changeFile(dirfd, name, fd, st)
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

// testHook, when set (by tests), is called at each step of a visit: an
// entry "opened", a file (not a directory) "stated".
var testHook func(step string, dirfd int, name string)

func hook(step string, dirfd int, name string) {
	if testHook != nil {
		testHook(step, dirfd, name)
	}
}

// changeFile changes what fd (st), opened as the entry name of dirfd,
// refers to, a file or anything else but a directory, only when the
// volume holds its one and only link. The pod can link and unlink as the
// walk goes, so no count of names nor any second look at a name can tell
// that no other link exists: between any look and the change, links come
// and go. Two facts do not move:
//
//   - the pod makes links only inside the volume (link(2) never crosses
//     a mount), so once a file has no link outside it never gets one;
//   - the link fd was opened through (its dentry), once unlinked, is
//     never linked again: a new link of the same name is another dentry.
//
// So a file whose link count was 1 at the stat, and whose own link still
// exists after it, had then its one link in the volume, and has none
// outside from then on. A file with more links is never changed: the walk
// cannot tell where the others are (it counts them, for a warning).
func (w *walker) changeFile(dirfd int, name string, fd int, st unix.Statx_t) error {
	if w.whole {
		return w.change(fd, st)
	}
	if st.Nlink > 1 {
		w.multiLinked++
		return nil
	}
	linked, err := stillLinked(fd, w.linkBuf)
	if errors.Is(err, unix.ENAMETOOLONG) {
		return w.changeFileBelow(dirfd, name, st)
	}
	if err != nil || !linked {
		return err // unlinked since it was opened: no longer in the volume
	}
	return w.change(fd, st)
}

// changeFileBelow is changeFile for a file whose path is too long for the
// kernel to name (more than PATH_MAX): it opens the entry again in a
// detached copy of the mount whose root is its directory, where its path
// is "/name", and checks and changes what it opened there. The copy holds
// no other mount and is gone when closed.
func (w *walker) changeFileBelow(dirfd int, name string, was unix.Statx_t) error {
	tree, err := unix.OpenTree(dirfd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("copy the mount of a deep directory: %w", err)
	}
	defer unix.Close(tree)
	fd, err := openEntry(tree, name)
	if errors.Is(err, unix.ENOENT) {
		return nil // gone meanwhile
	}
	if err != nil {
		return fmt.Errorf("open again: %w", err)
	}
	defer unix.Close(fd)
	st, err := statFd(fd)
	if err != nil || st.Ino != was.Ino || st.Mode&unix.S_IFMT != was.Mode&unix.S_IFMT {
		return err // another file under that name now: the pod's own
	}
	if st.Nlink > 1 {
		w.multiLinked++
		return nil
	}
	linked, err := stillLinked(fd, w.linkBuf)
	if err != nil || !linked {
		return err
	}
	return w.change(fd, st)
}

// wholeFileSystem reports whether the directory fd (st) is the root of its
// file system, ext2/3/4 (root inode 2), or of a btrfs subvolume (inode 256;
// btrfs refuses a link across subvolumes): then every link of every file
// below it is below it too, and no file there can have a link outside the
// volume. A provisioned volume (a btrfs subvolume, an ext4 image) and a
// PV of a whole disk are such. Other file systems are not asked: their
// root inode is not fixed.
func wholeFileSystem(fd int, st unix.Statx_t) (bool, error) {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return false, err
	}
	switch fs.Type {
	case unix.EXT4_SUPER_MAGIC:
		return st.Ino == 2, nil
	case unix.BTRFS_SUPER_MAGIC:
		return st.Ino == 256, nil
	}
	return false, nil
}

// deletedSuffix ends the kernel's name of a file opened through a link
// that has since been removed (/proc/self/fd, d_path(3)).
const deletedSuffix = " (deleted)"

// stillLinked reports whether the link fd was opened through still exists,
// from the kernel's name for fd. A file whose own name ends with the
// suffix reads as unlinked: it is left alone, which is safe. buf holds
// PATH_MAX bytes; a longer name fails with ENAMETOOLONG.
func stillLinked(fd int, buf []byte) (bool, error) {
	n, err := unix.Readlink(fdPath(fd), buf)
	if err != nil {
		return false, fmt.Errorf("read the name of an opened file: %w", err)
	}
	return !bytes.HasSuffix(buf[:n], []byte(deletedSuffix)), nil
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
