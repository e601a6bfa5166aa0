package nfstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	securejoin "github.com/cyphar/filepath-securejoin"
	billy "github.com/go-git/go-billy/v5"
	nfs "github.com/willscott/go-nfs"
	nfshelper "github.com/willscott/go-nfs/helpers"
	"golang.org/x/sys/unix"
)

// handleLimit is how many file handles the server remembers. go-nfs's
// handles name paths in a table; one pushed out of it is stale (ESTALE)
// for the client, which a real server's handles never are.
const handleLimit = 1 << 16

// Server is an NFSv3 server (go-nfs) on loopback that serves a directory
// of the host read-write, with MOUNT and NFS on one TCP port and no
// portmapper. It runs in the test process.
//
// Its file handles survive Stop and Restart, as a real server's do (they
// encode inode numbers there): go-nfs's handles are random IDs in a table,
// and the table belongs to the Server, not to one run of it. A client
// that held handles across a restart therefore carries on where a new
// table would answer every one of them with NFS3ERR_STALE.
type Server struct {
	t       testing.TB
	addr    string      // host:port, fixed by Start
	handler nfs.Handler // shared by every run: see above

	mu    sync.Mutex
	ln    net.Listener          // guarded by mu: nil while stopped
	conns map[net.Conn]struct{} // guarded by mu: open client connections
	done  chan struct{}         // guarded by mu: closed when the running Serve returns
}

// Option changes how Start starts a server.
type Option func(*serverConfig)

type serverConfig struct {
	host string
	port int
}

// IPv6 makes the server listen on [::1] instead of 127.0.0.1.
func IPv6() Option { return func(c *serverConfig) { c.host = "::1" } }

// OnPort makes the server listen on port rather than a free one: 2049, the
// NFS port, serves a mount without port= (an inline nfs: volume of a pod,
// which carries no mount options).
func OnPort(port int) Option { return func(c *serverConfig) { c.port = port } }

// Start serves dir (an existing directory) over NFSv3 on a free loopback
// port until the test ends.
func Start(t testing.TB, dir string, opts ...Option) *Server {
	t.Helper()
	cfg := serverConfig{host: "127.0.0.1"}
	for _, o := range opts {
		o(&cfg)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	quietGoNFS()
	s := &Server{t: t, handler: nfshelper.NewCachingHandler(&exportHandler{root: dir}, handleLimit)}
	s.addr = s.listen(net.JoinHostPort(cfg.host, strconv.Itoa(cfg.port)))
	t.Cleanup(s.Stop)
	return s
}

// Addr is the server's host:port ("127.0.0.1:PORT" or "[::1]:PORT").
func (s *Server) Addr() string { return s.addr }

// Port is the TCP port of both MOUNT and NFS.
func (s *Server) Port() int {
	_, port, _ := net.SplitHostPort(s.addr)
	n, _ := strconv.Atoi(port)
	return n
}

// Spec returns the remote target for the export path, as mount(8) takes
// it: "127.0.0.1:/path" or "[::1]:/path".
func (s *Server) Spec(path string) string {
	host, _, _ := net.SplitHostPort(s.addr)
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + path
}

// MountOptions returns the options a mount of this server needs (its
// ports, NFSv3 over TCP), followed by extra.
func (s *Server) MountOptions(extra ...string) string {
	p := strconv.Itoa(s.Port())
	return strings.Join(append([]string{"port=" + p, "mountport=" + p, "nfsvers=3", "proto=tcp"}, extra...), ",")
}

// Stop kills the server the way a dead one looks to its clients: the
// listener and every connection close, and nothing answers any more
// (connections are refused). It does nothing on a stopped server.
func (s *Server) Stop() {
	s.mu.Lock()
	ln, done := s.ln, s.done
	s.ln = nil
	for c := range s.conns {
		c.Close()
	}
	s.conns = nil
	s.mu.Unlock()
	if ln == nil {
		return
	}
	ln.Close()
	<-done
}

// Restart starts a stopped server again on the same address, with the
// same file handles.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	running := s.ln != nil
	s.mu.Unlock()
	if running {
		s.t.Fatal("nfstest: Restart of a running server")
	}
	s.listen(s.addr)
}

// listen serves on addr and returns the address it listens on.
func (s *Server) listen(addr string) string {
	s.t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		s.t.Fatalf("nfstest: listen on %s: %v", addr, err)
	}
	done := make(chan struct{})
	s.mu.Lock()
	s.ln, s.conns, s.done = ln, map[net.Conn]struct{}{}, done
	s.mu.Unlock()
	go func() {
		defer close(done)
		err := nfs.Serve(&trackedListener{Listener: ln, s: s}, s.handler)
		if err != nil && !errors.Is(err, net.ErrClosed) {
			s.t.Errorf("nfstest: NFS server on %s: %v", addr, err)
		}
	}()
	return ln.Addr().String()
}

// track registers a client connection, or closes it if the server has
// stopped meanwhile.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		c.Close()
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// trackedListener hands go-nfs the connections it accepts, and lets Stop
// close them.
type trackedListener struct {
	net.Listener
	s *Server
}

func (l *trackedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.s.track(c) {
			return c, err
		}
	}
}

var quietOnce sync.Once

// quietGoNFS silences go-nfs's package-wide logger, which prints every
// failed request (a lookup of a missing name, for one) on stdout: the
// client gets the same error as its answer.
func quietGoNFS() {
	quietOnce.Do(func() { nfs.Log.SetLevel(nfs.PanicLevel) })
}

// exportHandler answers MOUNT requests for any directory under root, and
// serves it read-write.
type exportHandler struct {
	root string
}

// Mount answers MNT. A failure still returns a file system: go-nfs asks
// for a handle of it before it looks at the status.
func (h *exportHandler) Mount(_ context.Context, _ net.Conn, req nfs.MountRequest) (nfs.MountStatus, billy.Filesystem, []nfs.AuthFlavor) {
	dir, err := securejoin.SecureJoin(h.root, string(req.Dirpath))
	var st os.FileInfo
	if err == nil {
		st, err = os.Stat(dir)
	}
	switch {
	case err != nil:
		return nfs.MountStatusErrNoEnt, hostFS{root: h.root}, nil
	case !st.IsDir():
		return nfs.MountStatusErrNotDir, hostFS{root: h.root}, nil
	}
	return nfs.MountStatusOk, hostFS{root: dir}, []nfs.AuthFlavor{nfs.AuthFlavorNull}
}

func (h *exportHandler) Change(f billy.Filesystem) billy.Change {
	c, _ := f.(billy.Change)
	return c
}

func (h *exportHandler) FSStat(_ context.Context, f billy.Filesystem, s *nfs.FSStat) error {
	var st unix.Statfs_t
	if err := unix.Statfs(f.Root(), &st); err != nil {
		return err
	}
	bsize := uint64(st.Bsize)
	s.TotalSize, s.FreeSize, s.AvailableSize = st.Blocks*bsize, st.Bfree*bsize, st.Bavail*bsize
	s.TotalFiles, s.FreeFiles, s.AvailableFiles = st.Files, st.Ffree, st.Ffree
	return nil
}

// The caching handler wrapped around exportHandler gives out the handles.
func (h *exportHandler) ToHandle(billy.Filesystem, []string) []byte { return nil }
func (h *exportHandler) FromHandle([]byte) (billy.Filesystem, []string, error) {
	return nil, nil, fmt.Errorf("handles come from the caching handler")
}
func (h *exportHandler) InvalidateHandle(billy.Filesystem, []byte) error { return nil }
func (h *exportHandler) HandleLimit() int                                { return -1 }
