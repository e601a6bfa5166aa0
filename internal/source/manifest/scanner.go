package manifest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// maxFileSize caps the size of one manifest file.
const maxFileSize = 16 << 20

// fileState is what the scanner knows about one manifest file.
type fileState struct {
	// sum is the SHA-256 of the bytes last read; valid when read is set.
	sum  [sha256.Size]byte
	read bool
	// parsed and problems are the result of parsing those bytes; parsed is
	// usable when there is no problem.
	parsed   []object
	problems []problem
	// conflicts are the duplicates with earlier files found by the last merge.
	conflicts []problem
	// good is the content in force: the last parse that was accepted.
	good     []object
	accepted bool
	// logged is the problem report last logged, so it is logged once.
	logged string
	// changedAt is when the file's bytes were last seen to change; for the
	// first read of a file present at start, its modification time.
	changedAt time.Time
	// initial is set for files present at the first scan since start.
	initial bool
	// link is set when the name is a symlink, or a file with more than
	// one name: its content may change through other names (see changes).
	link bool
	// orphaned is set for a file of a directory that was replaced, until
	// the new directory lists it; missingSince is when a listing of the new
	// directory with objects in it first lacked it (see refresh).
	orphaned     bool
	missingSince time.Time
}

// parsedOK reports whether the bytes last read parsed without a fatal problem.
func (f *fileState) parsedOK() bool { return f.read && len(f.problems) == 0 }

// allProblems returns the file's current problems in document order.
func (f *fileState) allProblems() []problem {
	return append(append([]problem(nil), f.problems...), f.conflicts...)
}

// scanner owns the file cache. It is used by one goroutine at a time (Run's).
type scanner struct {
	dir      string
	nodeName string
	parser   *parser
	logger   *zap.Logger
	files    map[string]*fileState
	// listed is set once a directory listing succeeded: the first full scan is done.
	listed bool
	// dirID is the directory listed last: a listing of another one means
	// that the directory was replaced. moved is set when the path was seen
	// to name another directory since (see follower), which tells it too
	// when the new directory reuses the inode number of a deleted one.
	dirID dirID
	moved bool
	// orphans counts the orphaned files; emptied is set while no file of
	// the directory, replaced, has objects, and loggedEmptied once that was
	// logged.
	orphans       int
	emptied       bool
	loggedEmptied bool
	// dirErr is why the directory could not be listed at the last full scan.
	dirErr error
	// loggedDirErr is the directory error last logged.
	loggedDirErr string
	// now is the clock (time.Now outside tests).
	now func() time.Time
	// recheck, when set, is when the held-back files must be looked at again.
	recheck time.Time
	// held are the files part of whose content waits to settle (see settle.go).
	held []string
	// inForce is what the last merge put in force, by key.
	inForce map[key]*object
	// claims are the last merge's claims (see merge).
	claims *claims
	// last is what the last result left when the fast path may build on
	// it, nil otherwise (see fastResult); dirty are the files read since
	// that result with new bytes, or not read; fullNext says that the next
	// result must merge everything: the directory was listed, or a file
	// forgotten.
	last     *snapshot
	dirty    map[string]bool
	fullNext bool
	// fullOnly turns the fast path off, and fastResults counts the
	// results it made (for tests).
	fullOnly    bool
	fastResults int
}

func newScanner(dir, nodeName string, logger *zap.Logger) *scanner {
	return &scanner{
		dir:      dir,
		nodeName: nodeName,
		parser:   newParser(nodeName),
		logger:   logger,
		files:    map[string]*fileState{},
		dirty:    map[string]bool{},
		now:      time.Now,
	}
}

// entry is a manifest name in the directory.
type entry struct {
	name    string
	link    bool // a symlink
	regular bool // a regular file when listed
}

// scan rereads the directory and every file in it, reparses the files whose
// bytes changed and returns the resulting snapshot.
func (sc *scanner) scan() *snapshot {
	sc.fullNext = true
	entries, id, err := sc.list()
	sc.dirErr = err
	if err == nil {
		first, replaced := !sc.listed, sc.listed && (id != sc.dirID || sc.moved)
		sc.listed, sc.dirID, sc.moved = true, id, false
		if replaced {
			sc.logger.Info("manifest directory replaced")
		}
		sc.refresh(entries, first, replaced)
	}
	return sc.result()
}

// reread reads the named files again, reparses those whose bytes changed
// and returns the resulting snapshot; a name that is gone is forgotten.
// The other files keep what was last read: their own events bring them in.
// While the scanner is whole, it lists the directory: the names are due
// only once the directory is quiet (see changes). When a name is gone with
// the directory, it forgets nothing and returns list: the directory must
// be listed, once quiet.
func (sc *scanner) reread(names []string) (snap *snapshot, list bool) {
	if sc.whole() {
		return sc.scan(), false
	}
	list = !sc.forget(sc.update(names))
	return sc.result(), list
}

// whole reports whether reading a name means listing the whole directory
// (see reread): until a listing succeeds, while the directory cannot be
// read, and while a replaced directory's files are orphaned. A listing
// taken in the gap of another name would find it gone, so then every name
// waits for the whole directory to be quiet (see changes), and nothing is
// read at once.
func (sc *scanner) whole() bool {
	return !sc.listed || sc.dirErr != nil || sc.orphans > 0
}

// readRenamed is reread for the files renamed into place (in) and the
// manifest names they were renamed from (away), read at once (see changes).
// A name of in that is gone has changed again since its rename, in a way
// that must wait for the quiet period: it is not forgotten but returned. A
// name of away gone with the directory is not forgotten either: list says
// that the directory must be listed, once quiet. While the scanner is
// whole, reading them means listing it, so it reads nothing and says so.
func (sc *scanner) readRenamed(in, away []string) (snap *snapshot, gone []string, list bool) {
	if sc.whole() {
		return sc.result(), nil, true
	}
	gone = sc.update(in)
	list = !sc.forget(sc.update(away))
	return sc.result(), gone, list
}

// update reads the named files again and returns the names that are gone.
func (sc *scanner) update(names []string) (gone []string) {
	for _, name := range names {
		if isManifestName(name) && !sc.load(sc.stat(name), false) {
			gone = append(gone, name)
		}
	}
	return gone
}

// forget drops the files of names, which are gone, and so their objects.
// Unless the directory is gone, which a file missing could mean: then it
// drops nothing and returns false, and a scan must tell.
func (sc *scanner) forget(names []string) bool {
	if len(names) > 0 && !sc.dirExists() {
		return false
	}
	for _, name := range names {
		if _, ok := sc.files[name]; ok {
			delete(sc.files, name)
			sc.fullNext = true
			sc.logger.Info("manifest file removed", zap.String("file", name))
		}
	}
	return true
}

// result merges what the files hold, logs what changed, and returns the
// snapshot: by the fast path when it can tell (see fastResult), else by
// merging every file.
func (sc *scanner) result() *snapshot {
	snap := sc.fastResult()
	if snap == nil {
		snap = sc.fullResult()
	}
	clear(sc.dirty)
	sc.fullNext = false
	return snap
}

// fullResult merges every file, logs what changed, and returns the snapshot.
func (sc *scanner) fullResult() *snapshot {
	names := slices.Sorted(maps.Keys(sc.files)) // sorted once for the three
	objs := sc.merge(names)
	sc.recheckOrphans()
	sc.logChanges(names, sc.dirErr)
	snap := newSnapshot(objs, sc.nodeName, sc.status(names, sc.dirErr))
	if sc.clean(names, objs, snap.status) {
		sc.last = snap
	}
	return snap
}

// list returns the candidate manifest files in the directory, and which
// directory it listed.
func (sc *scanner) list() ([]entry, dirID, error) {
	// O_DIRECTORY: a FIFO put in the directory's place must not block the scan.
	d, err := os.OpenFile(sc.dir, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, dirID{}, fmt.Errorf("read manifest directory: %w", err)
	}
	defer d.Close()
	var id dirID
	if info, err := d.Stat(); err == nil {
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			id = dirID{dev: st.Dev, ino: st.Ino}
		}
	}
	dirents, err := d.ReadDir(-1)
	if err != nil {
		return nil, dirID{}, fmt.Errorf("read manifest directory: %w", err)
	}
	var entries []entry
	for _, e := range dirents {
		if isManifestName(e.Name()) {
			entries = append(entries, entry{name: e.Name(), link: e.Type()&fs.ModeSymlink != 0, regular: e.Type().IsRegular()})
		}
	}
	return entries, id, nil
}

// stat returns the entry of one name, whether or not it exists.
func (sc *scanner) stat(name string) entry {
	info, err := os.Lstat(filepath.Join(sc.dir, name))
	return entry{name: name, link: err == nil && info.Mode()&fs.ModeSymlink != 0, regular: err == nil && info.Mode().IsRegular()}
}

// dirExists reports whether the directory is still there.
func (sc *scanner) dirExists() bool {
	info, err := os.Stat(sc.dir)
	return err == nil && info.IsDir()
}

// links reports whether any manifest is a symlink or a hard link.
func (sc *scanner) links() bool {
	for _, f := range sc.files {
		if f.link {
			return true
		}
	}
	return false
}

// isManifestName accepts *.yaml, *.yml and *.json and refuses hidden files
// (including the ..data machinery of a mounted configMap) and editor
// backups, locks and swap files.
func isManifestName(name string) bool {
	switch {
	case strings.HasPrefix(name, "."), strings.HasPrefix(name, "#"), strings.HasPrefix(name, "~"):
		return false
	}
	switch filepath.Ext(name) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// load reads one file and reparses it when its bytes changed. It returns
// false when the file is not there (or is not a regular file).
func (sc *scanner) load(e entry, first bool) bool {
	name := e.name
	raw, st, err := readManifest(filepath.Join(sc.dir, name), e.regular)
	if errors.Is(err, errNotManifest) {
		return false
	}
	f := sc.files[name]
	if f == nil {
		f = &fileState{initial: first}
		sc.files[name] = f
	}
	f.link = e.link || (st != nil && st.Nlink > 1) // a hard link: another name
	if err != nil {
		f.read, f.parsed, f.problems = false, nil, []problem{{msg: err.Error()}}
		sc.dirty[name] = true
		return true
	}
	if sum := sha256.Sum256(raw); !f.read || sum != f.sum {
		sc.dirty[name] = true
		changed := sc.now()
		if modTime := time.Unix(st.Mtim.Unix()); f.initial && !f.accepted && !f.read && modTime.Before(changed) {
			changed = modTime // written before start: maybe just before
		}
		f.sum, f.read, f.changedAt = sum, true, changed
		f.parsed, f.problems = sc.parser.parseFile(name, raw)
		if len(f.parsed) == 0 && len(f.problems) == 0 {
			f.problems = []problem{{msg: emptyProblem(f)}}
		}
		sc.logger.Debug("manifest file parsed", zap.String("file", name), zap.Int("objects", len(f.parsed)))
	}
	return true
}

// emptyProblem rejects a file without objects (empty, or only comments).
// A shell redirect (`kubectl get pod -o
// yaml > pod.yaml`) truncates the file before the writer has anything to
// write, and a crash during a save can leave it empty on disk; taking the
// empty file at its word would tear its pods' volumes down and delete their
// emptyDir data — at start too, where its last content is unknown and the
// file keeps the source unsynced. Deleting the file is how objects are
// removed.
func emptyProblem(f *fileState) string {
	if f.accepted {
		return "file has no objects: keeping its last good content (delete the file to remove its objects)"
	}
	return "file has no objects: it counts once it has some (delete it if it is meant to be empty)"
}

// errNotManifest means the name is absent or not a regular file.
var errNotManifest = errors.New("not a regular file")

// readManifest reads a regular file, following symlinks, up to maxFileSize,
// and returns it with the opened file's status. listedRegular says that the
// name was a regular file when it was listed: then it is opened without
// following a symlink (one swapped in since is looked at as below), and
// otherwise stat(2) first tells what it leads to, so that a device is never
// even opened. The open does not block and the opened file is checked
// too, so a FIFO swapped in after the check cannot hang the scan.
//
// It makes raw system calls: lstat (the caller's, or the listing), open,
// fstat, one read when the file has the size fstat gave, close. os.File
// would add four fcntl(2) calls and an epoll_ctl(2) that fails for a
// regular file.
func readManifest(path string, listedRegular bool) ([]byte, *unix.Stat_t, error) {
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC
	if listedRegular {
		flags |= unix.O_NOFOLLOW
	} else if !statRegular(path) {
		return nil, nil, errNotManifest
	}
	fd, err := openRetry(path, flags)
	switch {
	case listedRegular && errors.Is(err, unix.ELOOP):
		return readManifest(path, false) // a symlink now
	case errors.Is(err, unix.ENOENT):
		return nil, nil, errNotManifest
	case err != nil:
		return nil, nil, fmt.Errorf("cannot read file: %w", err)
	}
	defer unix.Close(fd) //nolint:errcheck // read-only
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, nil, errNotManifest
	}
	raw, err := readAll(fd, st.Size)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot read file: %w", err)
	}
	if len(raw) > maxFileSize {
		return nil, nil, fmt.Errorf("file is larger than %d MiB", maxFileSize>>20)
	}
	return raw, &st, nil
}

// statRegular reports whether path leads to a regular file.
func statRegular(path string) bool {
	var st unix.Stat_t
	return unix.Stat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

func openRetry(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags, 0)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

// readAll reads fd, whose status gave size, to its end, up to one byte
// more than maxFileSize. It reads size+1 bytes at once: when that returns
// the size, the file is read whole in one call; a file that grew since
// (or a file system that does not report sizes) is read on.
func readAll(fd int, size int64) ([]byte, error) {
	buf := make([]byte, min(max(size, 0), maxFileSize)+1)
	n := 0
	for {
		m, err := unix.Read(fd, buf[n:])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, err
		case m == 0:
			return buf[:n], nil
		}
		n += m
		switch {
		case int64(n) == size && n < len(buf):
			return buf[:n], nil // the size fstat gave, and short of the room
		case n == len(buf) && n > maxFileSize:
			return buf, nil // too large: the caller says so
		case n == len(buf):
			buf = append(buf, make([]byte, min(len(buf), maxFileSize+1-len(buf)))...)
		}
	}
}
