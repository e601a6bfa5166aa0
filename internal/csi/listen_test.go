package csi

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Listen makes the socket 0600; replaces a stale socket nothing answers
// on; refuses one something listens on, and anything that is not a
// socket, leaving both in place.
func TestListen(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "plugins", "csi.sock")
	l, path, err := Listen("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v, %v: want a socket of mode 0600", fi, err)
	}
	if _, _, err := Listen(sock); err == nil || !strings.Contains(err.Error(), "something listens on it already") {
		t.Errorf("a second Listen while the first listens: %v", err)
	}
	_ = l.Close() // leaves the socket file: a stale socket
	l2, _, err := Listen(sock)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Errorf("dial the new socket: %v", err)
	} else {
		_ = c.Close()
	}
	_ = l2.Close()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Listen(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen on a regular file: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Error("the file was replaced")
	}
	for _, bad := range []string{"relative.sock", "unix://rel", "/a/../b"} {
		if _, _, err := Listen(bad); err == nil {
			t.Errorf("Listen(%q) succeeded", bad)
		}
	}
	if entries, _ := os.ReadDir(filepath.Dir(sock)); len(entries) != 1 {
		t.Errorf("%s holds %v, want only the socket (no temporary directory left)", filepath.Dir(sock), entries)
	}
}
