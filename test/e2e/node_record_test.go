package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFailedStartRecordsNoNode: a start refused for a missing manifest
// directory or a port in use leaves no <root>/node-name, so a start with
// another --node-name (the one meant) works after it.
func TestFailedStartRecordsNoNode(t *testing.T) {
	a := newAgent(t)
	marker := filepath.Join(a.root, "node-name")
	noRecord := func(what string) {
		t.Helper()
		if got, err := os.ReadFile(marker); !os.IsNotExist(err) {
			t.Fatalf("after %s: node-name %q (%v); want none", what, got, err)
		}
	}

	missing := filepath.Join(t.TempDir(), "missing")
	code, out := runFailing(t, "--manifests", missing, "--root-dir", a.root, "--node-name", "typo-node", "--status-addr", freeAddr(t))
	if code != 1 || !strings.Contains(out, "manifest directory") {
		t.Fatalf("start with a missing manifest directory: exit %d, output:\n%s\nwant exit 1 naming the directory", code, out)
	}
	noRecord("a start with a missing manifest directory")

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	code, out = runFailing(t, "--manifests", a.manifests, "--root-dir", a.root, "--node-name", "typo-node", "--status-addr", taken.Addr().String())
	taken.Close()
	if code != 1 || !strings.Contains(out, "address already in use") {
		t.Fatalf("start on a port in use: exit %d, output:\n%s\nwant exit 1 saying the address is in use", code, out)
	}
	noRecord("a start on a port in use")

	a.start() // --node-name node-1
	if got, err := os.ReadFile(marker); err != nil || string(got) != "node-1\n" {
		t.Fatalf("node-name %q (%v) once the agent runs; want node-1", got, err)
	}
}
