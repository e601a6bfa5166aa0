package status

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// SocketMode is the mode of the unix sockets the agent listens on: its
// owner (root) and its group may connect, nobody else.
const SocketMode = 0o660

// unixPrefix starts an address that names a unix socket.
const unixPrefix = "unix://"

// maxSocketPath is the longest path a unix socket may have on Linux
// (sun_path holds 108 bytes with the terminating NUL).
const maxSocketPath = 107

// bindDirPattern names the private directory a socket is bound in before it
// is linked into place; with the "/s" it is bound as, the bind path is at
// most bindOverhead bytes longer than the socket's directory.
const (
	bindDirPattern = ".bind-"
	bindOverhead   = 1 + len(bindDirPattern) + 10 + 2
)

// Addr is where an endpoint listens: a TCP host:port, or a unix socket.
type Addr struct {
	Network string // "tcp" or "unix"
	Address string // host:port, or the socket's absolute path
}

func (a Addr) String() string {
	if a.Network == "unix" {
		return unixPrefix + a.Address
	}
	return a.Address
}

// ParseAddr reads an endpoint address: host:port (or tcp://host:port), or
// unix:///absolute/path for a unix socket.
func ParseAddr(s string) (Addr, error) {
	if rest, ok := strings.CutPrefix(s, "tcp://"); ok {
		s = rest
	}
	path, isUnix := strings.CutPrefix(s, unixPrefix)
	if !isUnix {
		if _, _, err := net.SplitHostPort(s); err != nil || strings.Contains(s, "://") {
			return Addr{}, fmt.Errorf("address %q: want host:port or unix:///absolute/path", s)
		}
		return Addr{Network: "tcp", Address: s}, nil
	}
	switch {
	case !filepath.IsAbs(path) || filepath.Clean(path) != path || path == "/":
		return Addr{}, fmt.Errorf("address %q: want unix:// and a clean absolute path, such as unix:///run/volume-agent/status.sock", s)
	case len(path) > maxSocketPath || len(filepath.Dir(path))+bindOverhead > maxSocketPath:
		return Addr{}, fmt.Errorf("address %q: the path is too long for a unix socket (at most %d bytes, and %d for its directory)", s, maxSocketPath, maxSocketPath-bindOverhead)
	}
	return Addr{Network: "unix", Address: path}, nil
}

// Listen binds addr. A unix socket is created with SocketMode and group gid
// (-1: the agent's own group) before anyone can connect to it, in a
// directory made (0755) if missing; a socket left at its path by an agent
// that was killed is replaced, but nothing else is (see clearStale).
func Listen(addr Addr, gid int) (net.Listener, error) {
	if addr.Network != "unix" {
		return net.Listen("tcp", addr.Address)
	}
	return listenUnix(addr.Address, gid)
}

// listenUnix binds a unix socket at path, race-free. bind(2) creates the
// socket file with the process's umask, and a client may connect from
// listen(2) on, so chmod after net.Listen would leave a window in which any
// user could connect (fchmod on the socket's descriptor does not change the
// file on Linux, and the umask is the whole process's, not this
// goroutine's). Instead the socket is bound in a fresh directory of mode
// 0700 beside path, where only the agent's user (root) can reach it, given
// its mode and group there, and only then hard-linked to path: link(2) is
// atomic and never replaces what is at path, so a concurrent start cannot
// be overwritten either.
func listenUnix(path string, gid int) (_ net.Listener, retErr error) {
	dir := filepath.Dir(path)
	// 0755: whether a user may connect is the socket's mode and group;
	// the group's members must be able to reach it, and the directory
	// holds nothing else. A directory that exists is left as it is.
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // G301: see above; access is the socket's 0660
		return nil, fmt.Errorf("unix socket: %w", err)
	}
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	if err := clearStale(path); err != nil {
		return nil, err
	}
	private, err := os.MkdirTemp(dir, bindDirPattern) // mode 0700
	if err != nil {
		return nil, fmt.Errorf("unix socket: %w", err)
	}
	bindPath := filepath.Join(private, "s")
	// Removing the private directory and its one link is all the undo
	// needed: once linked, path stays and the listener owns it.
	defer func() { _ = os.Remove(private) }()
	defer func() { _ = os.Remove(bindPath) }()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: bindPath, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("unix socket: %w", err)
	}
	ln.SetUnlinkOnClose(false) // the bind path is gone; Close removes path
	defer func() {
		if retErr != nil {
			_ = ln.Close()
		}
	}()
	if err := os.Chmod(bindPath, SocketMode); err != nil {
		return nil, fmt.Errorf("unix socket: %w", err)
	}
	if gid >= 0 {
		if err := os.Lchown(bindPath, -1, gid); err != nil {
			return nil, fmt.Errorf("unix socket: group %d: %w", gid, err)
		}
	}
	if err := os.Link(bindPath, path); err != nil {
		return nil, fmt.Errorf("unix socket: %w", err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("unix socket: %w", err)
	}
	return &unixListener{UnixListener: ln, path: path, file: fi}, nil
}

// unixListener removes its socket's path when closed, if the path is
// still this socket.
type unixListener struct {
	*net.UnixListener
	path string
	file os.FileInfo // the socket at path, as linked
}

func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	if fi, statErr := os.Lstat(l.path); statErr == nil && os.SameFile(fi, l.file) {
		_ = os.Remove(l.path)
	}
	return err
}

// checkDir refuses a socket directory in which another user could put
// something else in the socket's place once it is there: one owned by
// another user than root or the agent's, or that others may write to
// without the sticky bit (as /tmp has).
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("unix socket: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case ok && st.Uid != 0 && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("unix socket directory %s belongs to uid %d: its owner could replace the socket; give a directory of root's or the agent's", dir, st.Uid)
	case fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0:
		return fmt.Errorf("unix socket directory %s is writable by others (mode %v): they could replace the socket; remove their write permission or choose another directory", dir, fi.Mode().Perm())
	}
	return nil
}

// staleProbe bounds the connection attempt that tells a stale socket from
// one another process serves.
const staleProbe = time.Second

// clearStale removes the socket at path if nothing accepts connections on
// it: the one an agent killed with SIGKILL left behind. It refuses when a
// process still listens there (another agent) and never removes anything
// but a socket.
func clearStale(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("unix socket: %w", err)
	case fi.Mode().Type() != os.ModeSocket:
		return fmt.Errorf("unix socket %s: the path exists and is not a socket; the agent removes only a stale socket there: move it away or choose another path", path)
	}
	conn, err := net.DialTimeout("unix", path, staleProbe)
	switch {
	case err == nil:
		_ = conn.Close()
		return fmt.Errorf("unix socket %s: another process is listening on it (another volume-agent?): stop it or choose another path", path)
	case !errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("unix socket %s: cannot tell whether another process is listening on it: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unix socket: remove the stale socket: %w", err)
	}
	return nil
}
