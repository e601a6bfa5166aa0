package subpath

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/inflight"
	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/procpool"
)

// A subPath is opened below its volume in a checker process (one of the
// agent's procpool children, which also check host paths), which passes
// the opened descriptor back to the agent (SCM_RIGHTS): on a file system
// that stops answering below the volume (a hung FUSE server, an NFS
// server that answers GETATTR but never LOOKUP), the look-up that never
// returns holds that child, which the agent abandons, never a thread of
// the agent. Every volume type goes through it, not only hostPath and
// NFS: an emptyDir or a claim can sit on a FUSE mount too, and an open
// on a local disk costs a round trip of a few tens of microseconds.
//
// The agent then touches the opened file only in ways that never reach
// its file system's server: statx with AT_STATX_DONT_SYNC (cached
// attributes), readlink of /proc/self/fd (the dentry cache), open_tree
// and move_mount (the mount tree).

// Files passes requests to checker processes that answer with a
// descriptor (procpool.Pool with PassFiles).
type Files interface {
	DoFile(ctx context.Context, req []byte, release func()) ([]byte, *os.File, error)
}

var _ Files = (*procpool.Pool)(nil)

// Opener opens subPaths, one volume at a time: in Files when set, else in
// the agent's own process (tests). The zero value opens in process.
type Opener struct {
	Files Files

	// opening has the volumes (by path) with an open running: an open
	// stuck on hung storage outlives the preparation that started it,
	// and without this every retry would leave one more child (or, in
	// process, one more thread) stuck on the same volume; with it, no
	// new open of the volume starts while one is stuck.
	opening inflight.Set
}

// earlierWait is how long an open waits for an earlier open of the same
// volume: the checker's own deadline. One still running past it is stuck.
const earlierWait = procpool.DefaultRequestTimeout

// errHung is wrapped by the errors of an open that did not return: its
// volume's storage does not answer (or the node has too many checkers
// stuck), and the volume's other subPaths are not tried in that pass.
var errHung = errors.New("storage does not answer")

// open opens the subPath sub below the volume at path, as Preparer p
// resolves it, and returns an O_PATH descriptor of it, checked: never a
// device node, never outside the volume.
func (o *Opener) open(ctx context.Context, p Preparer, path, sub string) (int, error) {
	wait, cancel := context.WithTimeout(ctx, earlierWait)
	end, err := o.opening.Begin(wait, path)
	cancel()
	if err != nil {
		return -1, fmt.Errorf("%w: an earlier open below %s has not returned in %v: %w", errHung, path, earlierWait, err)
	}
	if o.Files == nil {
		return openInProcess(ctx, p, path, sub, end)
	}
	a, f, err := o.Files.DoFile(ctx, openRequest(p, path, sub), end)
	if f != nil {
		defer f.Close()
	}
	switch {
	case errors.Is(err, procpool.ErrNoAnswer) || errors.Is(err, procpool.ErrTooManyStuck) || err != nil && ctx.Err() != nil:
		return -1, fmt.Errorf("%w: %w", errHung, err)
	case err != nil:
		return -1, fmt.Errorf("ask a checker process to open the subPath: %w", err)
	}
	fd, err := openAnswer(a, f)
	if err != nil {
		return -1, err
	}
	if err := checkOpened(fd, path, string(a[1:])); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// openInProcess opens sub in the agent's process, bounded by ctx; no
// goroutine is started once ctx has ended.
func openInProcess(ctx context.Context, p Preparer, path, sub string, end func()) (int, error) {
	if err := ctx.Err(); err != nil {
		end()
		return -1, fmt.Errorf("%w: %w", errHung, err)
	}
	fd, err := mount.BoundedOpen(ctx, func() (int, error) {
		defer end()
		fd, _, err := p.openSubPath(path, sub)
		return fd, err
	}, func(fd int) { unix.Close(fd) })
	if err != nil && ctx.Err() != nil {
		return -1, fmt.Errorf("%w: %w", errHung, err)
	}
	return fd, err
}

// openSubPath opens the volume at path and sub below it, refusing device
// nodes, and returns the descriptor and the volume's path as the kernel
// names it.
func (p Preparer) openSubPath(path, sub string) (int, string, error) {
	vol, err := p.openVolume(path)
	if err != nil {
		return -1, "", err
	}
	defer unix.Close(vol)
	var st unix.Stat_t
	if err := unix.Fstat(vol, &st); err != nil {
		return -1, "", err
	}
	src, err := openBeneath(vol, sub, st.Mode&0o7777)
	if err != nil {
		return -1, "", err
	}
	if _, _, typ, err := idOf(src, ""); err != nil || typ == unix.S_IFCHR || typ == unix.S_IFBLK {
		unix.Close(src)
		return -1, "", cmpErr(err, fmt.Errorf("%w: a device node", ErrEscape))
	}
	volPath, err := fdPath(vol)
	if err != nil {
		unix.Close(src)
		return -1, "", err
	}
	return src, volPath, nil
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// checkOpened checks, in the agent, the descriptor a checker opened for
// the volume at path, which the checker found at volPath: not a device
// node, and at or below the volume. Neither look asks the file system.
func checkOpened(fd int, path, volPath string) error {
	if _, _, typ, err := idOf(fd, ""); err != nil || typ == unix.S_IFCHR || typ == unix.S_IFBLK {
		return cmpErr(err, fmt.Errorf("%w: a device node", ErrEscape))
	}
	got, err := fdPath(fd)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(volPath, "/") || !below(got, volPath) {
		return fmt.Errorf("%w: the checker opened %s, not below the volume %s (%s)", ErrEscape, got, path, volPath)
	}
	return nil
}

// below reports whether p is dir or below it.
func below(p, dir string) bool {
	return p == dir || dir == "/" && strings.HasPrefix(p, "/") || strings.HasPrefix(p, dir+"/")
}

// fdPath is the path the kernel gives the file fd refers to (from the
// dentry cache: no file system is asked); a deleted one is an error.
func fdPath(fd int) (string, error) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", err
	}
	if strings.HasSuffix(p, " (deleted)") || !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("the opened file is %s: gone, or not in this mount namespace", p)
	}
	return p, nil
}

// An open request is openPrefix, then the preparer's root, its host root,
// the volume's path and the subPath, separated by NUL bytes (which no
// path holds). An answer is one status byte, then the volume's path as
// the checker's kernel names it (statusOpened, with the descriptor) or the
// error's text.
const openPrefix = "open-subpath\x00"

const (
	statusOpened  = 0
	statusFailed  = 1
	statusEscape  = 2 // the error wraps ErrEscape
	statusRefused = 3 // a malformed request
)

func openRequest(p Preparer, path, sub string) []byte {
	return []byte(openPrefix + string(p.Root) + "\x00" + p.HostRoot + "\x00" + path + "\x00" + sub)
}

// IsOpenRequest reports whether req is a subPath open request, for a
// checker process that serves several kinds.
func IsOpenRequest(req []byte) bool { return bytes.HasPrefix(req, []byte(openPrefix)) }

// AnswerOpen is a checker process's answer to an open request, and the
// descriptor opened (-1 for none), which the checker passes and closes.
func AnswerOpen(req []byte) ([]byte, int) {
	fields := bytes.Split(bytes.TrimPrefix(req, []byte(openPrefix)), []byte{0})
	if !IsOpenRequest(req) || len(fields) != 4 {
		return append([]byte{statusRefused}, "an open request has 4 fields"...), -1
	}
	p := Preparer{Root: layout.Root(fields[0]), HostRoot: string(fields[1])}
	fd, volPath, err := p.openSubPath(string(fields[2]), string(fields[3]))
	if err != nil {
		return FailedOpen(err), -1
	}
	return append([]byte{statusOpened}, volPath...), fd
}

// FailedOpen is the answer to an open request that failed with err.
func FailedOpen(err error) []byte {
	status := byte(statusFailed)
	if errors.Is(err, ErrEscape) {
		status = statusEscape
	}
	return append([]byte{status}, err.Error()...)
}

// openAnswer reads a checker's answer to an open request, with the
// descriptor f it passed, and returns a descriptor of the agent's own.
func openAnswer(a []byte, f *os.File) (int, error) {
	switch {
	case len(a) > 1 && a[0] == statusOpened && f != nil:
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("keep the descriptor the checker passed: %w", err)
		}
		return fd, nil
	case len(a) > 1 && a[0] == statusEscape:
		return -1, fmt.Errorf("%w (%s)", ErrEscape, a[1:])
	case len(a) > 1 && a[0] == statusFailed:
		return -1, errors.New(string(a[1:]))
	case len(a) > 1 && a[0] == statusRefused:
		return -1, fmt.Errorf("the checker refused the request: %s", a[1:])
	}
	return -1, fmt.Errorf("the checker answered %q (with a descriptor: %v)", a, f != nil)
}
