package pluginreg

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const driver = "local.volume-agent.io"

// shortDir is a temporary directory whose socket paths fit sun_path (108
// bytes), which t.TempDir's long names may not.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "preg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// start runs a Server on dir until the test ends, and waits for its
// socket.
func start(t *testing.T, dir string) (*Server, <-chan error) {
	t.Helper()
	s, err := New(Config{Dir: dir, Driver: driver, Endpoint: "unix:///var/lib/kubelet/plugins/" + driver + "/csi.sock", Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	waitSocket(t, s.Path(), done)
	return s, done
}

// waitSocket waits until something answers on path, or Run ended.
func waitSocket(t *testing.T, path string, done <-chan error) {
	t.Helper()
	for {
		if c, err := net.Dial("unix", path); err == nil {
			_ = c.Close()
			return
		}
		select {
		case err := <-done:
			t.Fatalf("Run ended before the socket appeared: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// client dials the socket as the kubelet does.
func client(t *testing.T, path string) registerapi.RegistrationClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return registerapi.NewRegistrationClient(conn)
}

func TestGetInfo(t *testing.T) {
	dir := shortDir(t)
	s, _ := start(t, dir)
	if want := filepath.Join(dir, driver+"-reg.sock"); s.Path() != want {
		t.Fatalf("socket %s, want %s", s.Path(), want)
	}
	info, err := client(t, s.Path()).GetInfo(context.Background(), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != "CSIPlugin" || info.Name != driver || info.Endpoint != "/var/lib/kubelet/plugins/"+driver+"/csi.sock" ||
		strings.Join(info.SupportedVersions, ",") != "1.0.0" {
		t.Fatalf("GetInfo = %+v", info)
	}
}

func TestNotifyRegistrationStatus(t *testing.T) {
	s, _ := start(t, shortDir(t))
	if ok, err := s.Status(); ok || err != nil {
		t.Fatalf("Status before the kubelet said anything = %v, %v; want false, nil", ok, err)
	}
	c := client(t, s.Path())
	ctx := context.Background()
	if _, err := c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{Error: "plugin validation failed: version 0.3.0 unsupported"}); err != nil {
		t.Fatal(err)
	}
	ok, err := s.Status()
	if ok || err == nil || !strings.Contains(err.Error(), "version 0.3.0 unsupported") || !strings.Contains(err.Error(), driver) {
		t.Fatalf("Status after a refusal = %v, %v; want false and the kubelet's message naming the driver", ok, err)
	}
	if _, err := c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Status(); !ok || err != nil {
		t.Fatalf("Status after registration = %v, %v; want true, nil", ok, err)
	}
}

func TestSocketPermissionsAndRemoval(t *testing.T) {
	dir := shortDir(t)
	s, err := New(Config{Dir: filepath.Join(dir, "plugins_registry"), Driver: driver, Endpoint: "/csi.sock", Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitSocket(t, s.Path(), done)
	fi, err := os.Lstat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("socket mode %v, want 0600", perm)
	}
	entries, _ := os.ReadDir(filepath.Dir(s.Path()))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want the socket alone (no temporary left)", len(entries))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(s.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket after Run ended: %v, want it removed", err)
	}
}

// staleSocket leaves a socket file nothing listens on at path, as a
// SIGKILLed run does.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	_ = l.Close()
}

func TestStaleSocketReplaced(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, driver+"-reg.sock")
	staleSocket(t, path)
	// A second name keeps the stale socket's inode, so the new socket
	// cannot reuse its number.
	if err := os.Link(path, filepath.Join(dir, "keep")); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Lstat(path)
	s, _ := start(t, dir)
	after, err := os.Lstat(s.Path())
	if err != nil || os.SameFile(before, after) {
		t.Fatalf("the stale socket is still there (err %v)", err)
	}
	if _, err := client(t, s.Path()).GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo on the new socket: %v", err)
	}
}

func TestLiveSocketKept(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, driver+"-reg.sock")
	other, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	before, _ := os.Lstat(path)
	err = Serve(context.Background(), Config{Dir: dir, Driver: driver, Endpoint: "/csi.sock", Logger: zap.NewNop()})
	if err == nil || !strings.Contains(err.Error(), "another process answers on it") || !strings.Contains(err.Error(), path) {
		t.Fatalf("Run next to a live socket: %v; want a refusal naming the socket", err)
	}
	after, err := os.Lstat(path)
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("the live socket was replaced or removed (err %v)", err)
	}
	if c, err := net.Dial("unix", path); err != nil {
		t.Fatalf("the other process's socket no longer answers: %v", err)
	} else {
		_ = c.Close()
	}
}

func TestNotASocketKept(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, driver+"-reg.sock")
	if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Serve(context.Background(), Config{Dir: dir, Driver: driver, Endpoint: "/csi.sock", Logger: zap.NewNop()})
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Run with a regular file at the socket's path: %v; want a refusal", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "data" {
		t.Fatalf("the file was changed: %q, %v", b, err)
	}
}

func TestReplacedSocketNotRemoved(t *testing.T) {
	dir := shortDir(t)
	s, err := New(Config{Dir: dir, Driver: driver, Endpoint: "/csi.sock", Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitSocket(t, s.Path(), done)
	// A newer instance replaces the socket (a rolling update).
	tmp := filepath.Join(dir, "newer.sock")
	newer, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Close()
	newer.SetUnlinkOnClose(false)
	if err := os.Rename(tmp, s.Path()); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("unix", s.Path()); err != nil {
		t.Fatalf("the newer instance's socket was removed: %v", err)
	} else {
		_ = c.Close()
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	log := zap.NewNop()
	for _, cfg := range []Config{
		{Dir: "/d", Driver: driver, Endpoint: "csi.sock", Logger: log},
		{Dir: "/d", Driver: "a/b", Endpoint: "/csi.sock", Logger: log},
		{Dir: "/d", Driver: ".hidden", Endpoint: "/csi.sock", Logger: log},
		{Dir: "", Driver: driver, Endpoint: "/csi.sock", Logger: log},
		{Dir: "/d", Driver: driver, Endpoint: "/csi.sock"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// The kubelet's plugin watcher acts on inotify create events (a rename
// into the directory counts as one) of non-hidden names: the socket must
// appear under its final name once, already answering and 0600.
func TestKubeletWatchSeesSocketOnce(t *testing.T) {
	dir := shortDir(t)
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		t.Fatal(err)
	}
	s, _ := start(t, dir)
	var names []string
	buf := make([]byte, 64<<10)
	n, err := unix.Read(fd, buf)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < n; {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
		if !strings.HasPrefix(name, ".") { // the kubelet ignores hidden names
			names = append(names, name)
		}
		off += unix.SizeofInotifyEvent + int(ev.Len)
	}
	if len(names) != 1 || names[0] != filepath.Base(s.Path()) {
		t.Fatalf("create events of names the kubelet looks at: %q, want the socket once", names)
	}
}
