package atomicwriter

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// errNotEmpty refuses the fresh write of a directory that holds anything.
var errNotEmpty = errors.New("volume directory is not empty")

// WriteNew is Write for a volume directory that the caller has just created
// (or a tmpfs it has just mounted on one) and that no container has yet: it
// writes payload with one system call per step, through a descriptor of the
// directory, and skips every probe Write makes for entries left by an
// earlier write (there can be none). It checks that the directory is empty
// first; in a directory that is not, or after any error, it removes what it
// made and falls back to Write, whose result it returns.
func (w *Writer) WriteNew(payload map[string]File) (changed bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := validatePayload(payload); err != nil {
		return false, err
	}
	fastErr := w.writeFresh(payload)
	if fastErr == nil {
		w.freshWrites++
		return true, nil
	}
	if w.fellBack != nil {
		w.fellBack(fastErr)
	}
	return w.writeRoot(payload)
}

// writeFresh writes payload into the empty volume directory: a timestamped
// payload directory, ..data and the top-level links, each created with
// O_EXCL semantics (openat O_EXCL, mkdirat, symlinkat), so that nothing
// already there is ever overwritten or followed. On error it removes what
// it created.
func (w *Writer) writeFresh(payload map[string]File) (retErr error) {
	fd, err := unix.Open(w.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: w.dir, Err: err}
	}
	defer unix.Close(fd) //nolint:errcheck // a directory opened read-only: nothing to flush
	if err := checkEmpty(fd); err != nil {
		return err
	}
	f := fresh{w: w, fd: fd}
	defer func() {
		if retErr != nil {
			f.undo()
		}
	}()
	return f.write(payload)
}

// fresh is one fresh write: the descriptor of the volume directory, and
// what the write has created in it so far (for undo).
type fresh struct {
	w     *Writer
	fd    int
	ts    string   // the payload directory, once made
	links []string // ..data and the top-level links, as made
}

func (f *fresh) write(payload map[string]File) error {
	if err := f.mkdirTimestamped(); err != nil {
		return err
	}
	if err := f.writeTree(payload); err != nil {
		return err
	}
	if err := f.symlink(f.ts, dataLink); err != nil {
		return fmt.Errorf("create %s: %w", dataLink, err)
	}
	for _, name := range topLevelNames(payload) {
		if err := f.symlink(linkTarget(name), name); err != nil {
			return fmt.Errorf("link %q: %w", name, err)
		}
	}
	return nil
}

// checkEmpty fails unless the directory open at fd holds nothing but "."
// and "..". It reads to the end of the directory: a file system may return
// fewer entries than fit in one read.
func checkEmpty(fd int) error {
	var buf [1024]byte
	for {
		n, err := unix.Getdents(fd, buf[:])
		if err != nil {
			return fmt.Errorf("list volume directory: %w", err)
		}
		if n <= 0 {
			return nil
		}
		_, _, names := unix.ParseDirent(buf[:n], -1, nil)
		if len(names) > 0 { // ParseDirent leaves out "." and ".."
			return fmt.Errorf("%w: it holds %q", errNotEmpty, names[0])
		}
	}
}

// mkdirTimestamped makes the payload directory, 0755 exactly.
func (f *fresh) mkdirTimestamped() error {
	name := ".." + time.Now().UTC().Format(tsLayout) + "." + strconv.FormatUint(uint64(rand.Uint32()), 10) //nolint:gosec // G404: uniqueness, not secrecy: the directory is empty
	if err := unix.Mkdirat(f.fd, name, uint32(dirMode)); err != nil {
		return fmt.Errorf("create payload directory: %w", err)
	}
	f.ts = name
	if umaskKeeps(dirMode) {
		return nil
	}
	if err := unix.Fchmodat(f.fd, name, uint32(dirMode), 0); err != nil {
		return fmt.Errorf("chmod directory: %w", err)
	}
	return nil
}

// writeTree creates the nested directories of payload, then its files, as
// Writer.writeTree does.
func (f *fresh) writeTree(payload map[string]File) error {
	gids := dirGIDs(payload)
	for _, sub := range parentDirs(payload) {
		if err := f.mkdir(sub, gids[sub]); err != nil {
			return fmt.Errorf("create directory %q: %w", sub, err)
		}
	}
	for _, p := range sortedPaths(payload) {
		if err := f.writeFile(p, payload[p]); err != nil {
			return err
		}
	}
	return nil
}

// mkdir makes the nested directory sub of the payload directory, 0755
// exactly and with group gid when set. The mode and group are set through
// a descriptor opened without following any symlink.
func (f *fresh) mkdir(sub string, gid *int64) error {
	name := path.Join(f.ts, sub)
	if err := unix.Mkdirat(f.fd, name, uint32(dirMode)); err != nil {
		return err
	}
	if umaskKeeps(dirMode) && gid == nil {
		return nil
	}
	d, err := f.openBeneath(name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(d) //nolint:errcheck // a directory opened read-only: nothing to flush
	if err := unix.Fchmod(d, uint32(dirMode)); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	if gid != nil {
		if err := unix.Fchown(d, -1, int(*gid)); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	return nil
}

// writeFile creates one payload file, writes it, and sets its owner and
// mode through its descriptor. A file whose owner is left as created is
// created with its mode when the umask keeps every bit of it, and needs no
// chmod; any other is created 0600 (its content never readable under a
// looser mode or owner than the final ones), then chown'ed and chmod'ed.
func (f *fresh) writeFile(p string, file File) (retErr error) {
	if f.w.failWrite != nil {
		if err := f.w.failWrite(p); err != nil {
			return fmt.Errorf("write file %q: %w", p, err)
		}
	}
	exact := file.UID == nil && file.GID == nil && umaskKeeps(file.Mode)
	mode := uint32(0o600)
	if exact {
		mode = uint32(file.Mode)
	}
	fd, err := f.openBeneath(path.Join(f.ts, p), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("create file %q: %w", p, err)
	}
	defer func() {
		if err := unix.Close(fd); err != nil && retErr == nil {
			retErr = fmt.Errorf("close file %q: %w", p, err)
		}
	}()
	if err := writeAll(fd, file.Data); err != nil {
		return fmt.Errorf("write file %q: %w", p, err)
	}
	if exact {
		return nil
	}
	if file.UID != nil || file.GID != nil {
		if err := unix.Fchown(fd, idOrKeep(file.UID), idOrKeep(file.GID)); err != nil {
			return fmt.Errorf("chown file %q: %w", p, err)
		}
	}
	if err := unix.Fchmod(fd, uint32(file.Mode)); err != nil {
		return fmt.Errorf("chmod file %q: %w", p, err)
	}
	return nil
}

// openBeneath opens name, relative to the volume directory, refusing any
// symlink on the way and any path leading out of the directory.
func (f *fresh) openBeneath(name string, flags int, mode uint32) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC), //nolint:gosec // G115: open flags are non-negative
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	// Any error, EAGAIN from a rename racing the lookup included, fails
	// the fresh write, and WriteNew falls back to Write.
	return unix.Openat2(f.fd, name, &how)
}

// writeAll writes data whole, as many write(2)s as it takes.
func writeAll(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return errors.New("wrote nothing")
		}
		data = data[n:]
	}
	return nil
}

func (f *fresh) symlink(target, name string) error {
	if err := unix.Symlinkat(target, f.fd, name); err != nil {
		return err
	}
	f.links = append(f.links, name)
	return nil
}

// undo removes what the failed write created: its links, then its payload
// directory. It runs before the fall-back to Write, whose clean-up would
// remove them too; anything it cannot remove is left to that clean-up.
func (f *fresh) undo() {
	for _, name := range f.links {
		_ = unix.Unlinkat(f.fd, name, 0)
	}
	if f.ts == "" {
		return
	}
	root, err := os.OpenRoot(f.w.dir)
	if err != nil {
		return
	}
	defer root.Close()
	_ = root.RemoveAll(f.ts)
}

// umaskKeeps reports whether the process's umask leaves every bit of mode,
// so that mkdir(2) alone gives a directory that mode. When the umask cannot
// be read, it says no, and the mode is set by a chmod.
func umaskKeeps(mode os.FileMode) bool {
	m, ok := processUmask()
	return ok && uint32(mode)&m == 0
}

// processUmask reads the umask once from /proc/self/status: umask(2) can
// only read it by changing it, which would race other goroutines' creates.
// The agent never changes its umask; a test that does resets processUmask.
// Were it changed all the same, a umask that strips more than the one read
// would make the payload directory stricter than 0755, never looser.
var processUmask = sync.OnceValues(readUmask)

func readUmask() (uint32, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "Umask:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			return uint32(m), err == nil
		}
	}
	return 0, false
}
