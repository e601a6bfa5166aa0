package status

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestParseAddr(t *testing.T) {
	long := "/" + strings.Repeat("d", 90) + "/s.sock"
	for _, tc := range []struct {
		in      string
		want    Addr
		wantErr string
	}{
		{in: "127.0.0.1:9810", want: Addr{"tcp", "127.0.0.1:9810"}},
		{in: "tcp://127.0.0.1:9810", want: Addr{"tcp", "127.0.0.1:9810"}},
		{in: "[::1]:0", want: Addr{"tcp", "[::1]:0"}},
		{in: ":9810", want: Addr{"tcp", ":9810"}},
		{in: "unix:///run/volume-agent/status.sock", want: Addr{"unix", "/run/volume-agent/status.sock"}},
		{in: "unix://run/status.sock", wantErr: "clean absolute path"},
		{in: "unix:///run/../status.sock", wantErr: "clean absolute path"},
		{in: "unix:///", wantErr: "clean absolute path"},
		{in: "unix://" + long, wantErr: "too long"},
		{in: "127.0.0.1", wantErr: "want host:port"},
		{in: "http://127.0.0.1:9810", wantErr: "want host:port"},
		{in: "/run/status.sock", wantErr: "want host:port"},
	} {
		got, err := ParseAddr(tc.in)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("ParseAddr(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("ParseAddr(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		case tc.wantErr == "" && got.String() != strings.TrimPrefix(tc.in, "tcp://"):
			t.Errorf("ParseAddr(%q).String() = %q", tc.in, got.String())
		}
	}
}

// socketDir returns a short directory for sockets: t.TempDir's paths can
// be too long for one.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "st-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func listenTest(t *testing.T, path string, gid int) net.Listener {
	t.Helper()
	ln, err := Listen(Addr{Network: "unix", Address: path}, gid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func TestListenUnixModeGroupAndCleanup(t *testing.T) {
	path := filepath.Join(socketDir(t), "run", "status.sock") // run/ is made
	gid := os.Getgid()
	if os.Geteuid() == 0 {
		gid = 4242 // root may give the socket any group
	}
	ln := listenTest(t, path, gid)
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != SocketMode || int(st.Gid) != gid {
		t.Errorf("socket %v, group %d; want a socket of mode %v, group %d", fi.Mode(), st.Gid, os.FileMode(SocketMode), gid)
	}
	if dir, _ := os.Stat(filepath.Dir(path)); dir.Mode().Perm() != 0o755 {
		t.Errorf("directory made with mode %v, want 0755", dir.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %v; want the socket alone (the private bind directory removed)", entries)
	}
	if ln.Addr().String() != path {
		t.Errorf("Addr() = %s, want %s", ln.Addr(), path)
	}
	serveOK(t, ln)
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("connect to the socket: %v", err)
	}
	conn.Close()
	ln.Close()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after Close: %v", err)
	}
}

// serveOK answers every request on ln with 200 until the test ends.
func serveOK(t *testing.T, ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Shutdown(context.Background()); <-done })
}

func TestListenUnixStaleSocket(t *testing.T) {
	path := filepath.Join(socketDir(t), "status.sock")
	// What an agent killed with SIGKILL leaves: a socket nobody listens on.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("stale socket not there: %v", err)
	}
	ln := listenTest(t, path, -1)
	serveOK(t, ln)
	client := unixClient(path)
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://agent/")
	if err != nil {
		t.Fatalf("the new socket does not answer: %v", err)
	}
	resp.Body.Close()
}

func TestListenUnixRefusesLiveSocketAndOtherFiles(t *testing.T) {
	dir := socketDir(t)
	live := filepath.Join(dir, "live.sock")
	serveOK(t, listenTest(t, live, -1))
	if _, err := Listen(Addr{Network: "unix", Address: live}, -1); err == nil || !strings.Contains(err.Error(), "another process is listening") {
		t.Errorf("Listen on a socket another process serves = %v; want refused", err)
	}
	if _, err := net.Dial("unix", live); err != nil {
		t.Errorf("the first listener's socket is gone after a refused Listen: %v", err)
	}

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	dirPath := filepath.Join(dir, "dir")
	if err := os.Mkdir(dirPath, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(live, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, dirPath, link} {
		if _, err := Listen(Addr{Network: "unix", Address: p}, -1); err == nil || !strings.Contains(err.Error(), "is not a socket") {
			t.Errorf("Listen on %s = %v; want refused as not a socket", filepath.Base(p), err)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep" {
		t.Errorf("regular file changed: %q, %v", b, err)
	}
	if _, err := os.Lstat(link); err != nil {
		t.Errorf("symlink removed: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 4 {
		t.Errorf("directory holds %d entries after refused Listens, want 4 (no bind directory left)", len(entries))
	}
}

func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
}

func TestListenUnixRefusesADirectoryOthersControl(t *testing.T) {
	dir := socketDir(t)
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(Addr{Network: "unix", Address: filepath.Join(open, "s.sock")}, -1); err == nil || !strings.Contains(err.Error(), "is writable by others") {
		t.Errorf("Listen in a directory of mode 0777 = %v; want refused", err)
	}
	if err := os.Chmod(open, os.ModeSticky|0o777); err != nil { // as /tmp
		t.Fatal(err)
	}
	listenTest(t, filepath.Join(open, "s.sock"), -1)

	if os.Geteuid() != 0 {
		return // only root can give a directory away
	}
	theirs := filepath.Join(dir, "theirs")
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(Addr{Network: "unix", Address: filepath.Join(theirs, "s.sock")}, -1); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("Listen in a directory of uid 65534 = %v; want refused", err)
	}
}
