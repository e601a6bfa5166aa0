package csi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volume-agent/volume-agent/internal/keylock"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/local"
)

// Bounds of the server.
const (
	// callTimeout bounds every call: a caller with a later deadline (or
	// none) gets this one. The capacity backend's tools have 2 minutes
	// each; a volume made from a large snapshot on images copies data.
	callTimeout = 5 * time.Minute
	// maxCalls is how many calls run at once; more wait for a slot until
	// their deadline (the sidecars retry with backoff).
	maxCalls = 16
	// maxMessage bounds a request's size (the CSI sidecars send a few KiB).
	maxMessage = 1 << 20
)

// Config configures a Driver. Every field is required unless it says
// otherwise.
type Config struct {
	// Local is the local provisioner whose volumes the driver serves.
	Local *local.Provisioner
	// NodeName is this node's name: the node ID and the value of the
	// topology key kubernetes.io/hostname.
	NodeName string
	// Version is the agent's version (GetPluginInfo).
	Version string
	// ReclaimDelay is how long after the first DeleteVolume a volume is
	// deleted, and after the first DeleteSnapshot a snapshot
	// (--reclaim-delay); 0 deletes at once.
	ReclaimDelay time.Duration
	Logger       *zap.Logger
	// Now is the clock (optional; time.Now).
	Now func() time.Time
}

// Driver serves the CSI services.
type Driver struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedControllerServer
	csipb.UnimplementedNodeServer

	cfg   Config
	log   *zap.Logger
	recs  records
	snaps snapRecords
	locks keylock.Locks // by volume ID and "snapshot/"+snapshot ID
	slots chan struct{}
	ready atomic.Bool
}

// New checks cfg and returns a Driver.
func New(cfg Config) (*Driver, error) {
	if cfg.Local == nil || cfg.NodeName == "" || cfg.Logger == nil {
		return nil, errors.New("csi: a local provisioner, the node name and a logger are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	dir := filepath.Join(cfg.Local.Root(), RecordsDir)
	d := &Driver{cfg: cfg, log: cfg.Logger.Named("csi"), slots: make(chan struct{}, maxCalls),
		recs:  records{dir: dir, what: "volume"},
		snaps: snapRecords{dir: filepath.Join(dir, SnapshotRecordsDir), what: "snapshot"}}
	if err := d.recs.ensure(); err != nil {
		return nil, fmt.Errorf("csi: records directory: %w", err)
	}
	if err := d.snaps.ensure(); err != nil {
		return nil, fmt.Errorf("csi: snapshot records directory: %w", err)
	}
	d.ready.Store(true)
	return d, nil
}

// Name is the driver's name.
const Name = provisioner.LocalName

// TopologyKey is the one topology key: the node's hostname label.
const TopologyKey = "kubernetes.io/hostname"

// Server returns a gRPC server with the three services registered.
func (d *Driver) Server() *grpc.Server {
	s := grpc.NewServer(grpc.UnaryInterceptor(d.intercept), grpc.MaxRecvMsgSize(maxMessage))
	csipb.RegisterIdentityServer(s, d)
	csipb.RegisterControllerServer(s, d)
	csipb.RegisterNodeServer(s, d)
	return s
}

// intercept gives every call a deadline and a slot, and logs failures.
func (d *Driver) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	select {
	case d.slots <- struct{}{}:
		defer func() { <-d.slots }()
	case <-ctx.Done():
		return nil, status.Errorf(codes.ResourceExhausted, "%s: %d calls are running already and none ended before the deadline: retry later", info.FullMethod, maxCalls)
	}
	resp, err := handler(ctx, req)
	if err != nil {
		d.log.Info("CSI call failed", zap.String("method", info.FullMethod), zap.Error(err))
	} else {
		d.log.Debug("CSI call", zap.String("method", info.FullMethod))
	}
	return resp, err
}

// Listen listens on endpoint ("unix:///path" or "/path"): the socket is
// made mode 0600 in a private directory and renamed into place, so no
// other user can ever connect. A socket left by an earlier run is
// replaced only after a connection to it is refused (nothing listens).
func Listen(endpoint string) (net.Listener, string, error) {
	path, err := SocketPath(endpoint)
	if err != nil {
		return nil, "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, "", fmt.Errorf("CSI endpoint %s: create its directory: %w", path, err)
	}
	if err := removeStale(path); err != nil {
		return nil, "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(path), ".csi-sock-")
	if err != nil {
		return nil, "", fmt.Errorf("CSI endpoint %s: %w", path, err)
	}
	defer os.RemoveAll(tmp) //nolint:errcheck // a private, empty directory
	l, err := net.Listen("unix", filepath.Join(tmp, "s"))
	if err != nil {
		return nil, "", fmt.Errorf("CSI endpoint %s: %w", path, err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	err = os.Chmod(filepath.Join(tmp, "s"), 0o600)
	if err == nil {
		err = os.Rename(filepath.Join(tmp, "s"), path)
	}
	if err != nil {
		_ = l.Close()
		return nil, "", fmt.Errorf("CSI endpoint %s: %w", path, err)
	}
	return l, path, nil
}

// SocketPath is the path of endpoint: "unix:///path" or "/path".
func SocketPath(endpoint string) (string, error) {
	path := endpoint
	if rest, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		path = rest
	}
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return "", fmt.Errorf("CSI endpoint %q: want unix:///absolute/path or /absolute/path", endpoint)
	}
	return path, nil
}

// removeStale removes a socket at path that nothing listens on; anything
// else at path is refused.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("CSI endpoint %s: %w", path, err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("CSI endpoint %s: exists and is not a socket (%s): remove it or give another --csi-endpoint", path, fi.Mode().Type())
	}
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err == nil {
		_ = c.Close()
		return fmt.Errorf("CSI endpoint %s: something listens on it already (another agent?): stop it first", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("CSI endpoint %s: remove the stale socket of an earlier run: %w", path, err)
	}
	return nil
}

// Serve serves the driver on endpoint until ctx ends, then stops
// gracefully (for at most 10 s) and removes the socket.
func (d *Driver) Serve(ctx context.Context, endpoint string) error {
	l, path, err := Listen(endpoint)
	if err != nil {
		return err
	}
	s := d.Server()
	d.log.Info("CSI driver serving", zap.String("endpoint", path))
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(l) }()
	select {
	case err = <-errc:
	case <-ctx.Done():
		stopped := make(chan struct{})
		go func() { s.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			s.Stop()
		}
	}
	_ = os.Remove(path)
	return err
}
