package pluginreg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Bounds of the registration server.
const (
	// maxRecvMsgSize bounds a request: the kubelet sends an empty
	// InfoRequest and a RegistrationStatus holding one error message.
	maxRecvMsgSize = 64 << 10
	// maxStreams bounds the calls served at once on one connection.
	maxStreams = 16
	// stopWait bounds a graceful stop; calls still running then are cut.
	stopWait = 5 * time.Second
	// probeTimeout bounds the connect that tells a live socket from a
	// stale one.
	probeTimeout = time.Second
)

// SupportedVersions are the CSI versions the driver serves, as the kubelet
// reads them from GetInfo.
var SupportedVersions = []string{"1.0.0"}

// Config configures a Server.
type Config struct {
	// Dir is the kubelet's plugin registry directory
	// (/var/lib/kubelet/plugins_registry). Created (0700) when missing.
	Dir string
	// Driver is the CSI driver's name; the socket is <Dir>/<Driver>-reg.sock.
	Driver string
	// Endpoint is the CSI socket's path as the kubelet sees it: an
	// absolute path, or one with the unix:// scheme, which is removed
	// (the kubelet dials the path it is given as is).
	Endpoint string
	// Logger is required; the server names it "pluginreg".
	Logger *zap.Logger
}

// Server serves the registration socket. Create it with New; Run serves.
type Server struct {
	registerapi.UnimplementedRegistrationServer
	cfg  Config
	path string
	log  *zap.Logger

	mu sync.Mutex
	// notified says whether the kubelet has called NotifyRegistrationStatus
	// since Run started; registered and regErr are what it said last.
	notified   bool  // guarded by mu
	registered bool  // guarded by mu
	regErr     error // guarded by mu
}

var _ registerapi.RegistrationServer = (*Server)(nil)

// New checks cfg and builds the server; it creates nothing.
func New(cfg Config) (*Server, error) {
	cfg.Endpoint = strings.TrimPrefix(cfg.Endpoint, "unix://")
	switch {
	case cfg.Logger == nil:
		return nil, errors.New("pluginreg: Config.Logger is required")
	case cfg.Dir == "":
		return nil, errors.New("pluginreg: Config.Dir is required")
	case cfg.Driver == "" || strings.ContainsAny(cfg.Driver, "/\x00") || strings.HasPrefix(cfg.Driver, "."):
		// A name starting with "." would make the kubelet ignore the socket.
		return nil, fmt.Errorf("pluginreg: driver name %q: want a DNS subdomain (no \"/\", not starting with \".\")", cfg.Driver)
	case !filepath.IsAbs(cfg.Endpoint):
		return nil, fmt.Errorf("pluginreg: CSI endpoint %q: want an absolute path (or unix:// and one)", cfg.Endpoint)
	}
	path := filepath.Join(cfg.Dir, cfg.Driver+"-reg.sock")
	return &Server{cfg: cfg, path: path, log: cfg.Logger.Named("pluginreg").With(zap.String("socket", path))}, nil
}

// Serve builds a Server for cfg and runs it until ctx ends.
func Serve(ctx context.Context, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// Path is the registration socket's path.
func (s *Server) Path() string { return s.path }

// Status says whether the kubelet registered the driver: false and a nil
// error until it says, then what it said last (its error message when it
// refused). A kubelet that restarts registers the driver again.
func (s *Server) Status() (registered bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.registered, s.regErr
}

// GetInfo tells the kubelet the driver's name, type and CSI endpoint.
func (s *Server) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	s.log.Debug("kubelet asked for the plugin info")
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              s.cfg.Driver,
		Endpoint:          s.cfg.Endpoint,
		SupportedVersions: append([]string(nil), SupportedVersions...),
	}, nil
}

// NotifyRegistrationStatus records what the kubelet made of GetInfo's
// answer.
func (s *Server) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	var err error
	if !st.PluginRegistered {
		msg := st.Error
		if msg == "" {
			msg = "no reason given"
		}
		err = fmt.Errorf("kubelet did not register CSI driver %s: %s", s.cfg.Driver, msg)
	}
	s.mu.Lock()
	s.notified, s.registered, s.regErr = true, st.PluginRegistered, err
	s.mu.Unlock()
	if err != nil {
		s.log.Warn("kubelet refused the CSI driver", zap.String("driver", s.cfg.Driver), zap.Error(err))
	} else {
		s.log.Info("kubelet registered the CSI driver", zap.String("driver", s.cfg.Driver), zap.String("endpoint", s.cfg.Endpoint))
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Run creates the socket, serves it until ctx ends, then removes it. It
// fails at once when another process answers on the socket.
func (s *Server) Run(ctx context.Context) error {
	l, err := s.listen()
	if err != nil {
		return err
	}
	created, err := os.Lstat(s.path)
	if err != nil {
		_ = l.Close()
		return fmt.Errorf("registration socket %s: %w", s.path, err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(maxRecvMsgSize), grpc.MaxConcurrentStreams(maxStreams))
	registerapi.RegisterRegistrationServer(srv, s)
	s.log.Info("registration socket serving", zap.String("driver", s.cfg.Driver), zap.String("endpoint", s.cfg.Endpoint))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	select {
	case err = <-served:
		s.remove(created)
		return fmt.Errorf("registration socket %s: %w", s.path, err)
	case <-ctx.Done():
	}
	// Removed while the listener still holds the socket's inode, so that
	// the comparison with created cannot match a reused inode number.
	s.remove(created)
	stop(srv)
	if err := <-served; err != nil {
		s.log.Info("registration server stopped", zap.Error(err))
	}
	return nil
}

// stop stops srv gracefully, cutting the calls still running after
// stopWait.
func stop(srv *grpc.Server) {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(stopWait):
		srv.Stop()
		<-done
	}
}

// listen makes the socket appear at its path already listening and 0600:
// it is bound under a hidden name, which the kubelet ignores, chmodded,
// then renamed into place, so the kubelet's watch never sees it with other
// permissions or not yet answering.
func (s *Server) listen() (net.Listener, error) {
	if err := os.MkdirAll(s.cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("plugin registry directory: %w", err)
	}
	if err := s.clearStale(); err != nil {
		return nil, err
	}
	tmp := filepath.Join(s.cfg.Dir, "."+s.cfg.Driver+"-reg.sock.tmp")
	if err := removeSocket(tmp); err != nil {
		return nil, err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("registration socket %s: %w", s.path, err)
	}
	// The file is renamed: Run removes it by its final path.
	l.SetUnlinkOnClose(false)
	err = os.Chmod(tmp, 0o600)
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err != nil {
		_ = l.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("registration socket %s: %w", s.path, err)
	}
	return l, nil
}

// clearStale removes the socket a previous run left at the path, after
// finding that nothing answers on it. A socket something answers on is
// another process's, and anything else at the path is not the agent's:
// both are refused, and left alone.
func (s *Server) clearStale() error {
	fi, err := os.Lstat(s.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("registration socket %s: %w", s.path, err)
	case fi.Mode().Type() != os.ModeSocket:
		return fmt.Errorf("registration socket %s: the path exists and is not a socket (%s): remove it if nothing needs it", s.path, fi.Mode().Type())
	}
	c, err := net.DialTimeout("unix", s.path, probeTimeout)
	if err == nil {
		_ = c.Close()
		return fmt.Errorf("registration socket %s: another process answers on it (a second agent, or a node-driver-registrar for %s?): stop it first", s.path, s.cfg.Driver)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("registration socket %s: cannot tell whether another process serves it: %w", s.path, err)
	}
	s.log.Info("removing the stale registration socket of a previous run")
	return removeSocket(s.path)
}

// removeSocket removes the socket at path, if any; anything else there is
// an error.
func removeSocket(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode().Type() != os.ModeSocket:
		return fmt.Errorf("%s exists and is not a socket (%s): remove it if nothing needs it", path, fi.Mode().Type())
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// remove removes the socket when Run stops, so the kubelet unregisters the
// driver, unless the path no longer is the socket Run created: a newer
// instance's is left in place.
func (s *Server) remove(created os.FileInfo) {
	fi, err := os.Lstat(s.path)
	if err != nil || !os.SameFile(fi, created) {
		s.log.Info("registration socket replaced or gone; left in place")
		return
	}
	if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("registration socket not removed", zap.Error(err))
		return
	}
	s.log.Info("registration socket removed")
}
