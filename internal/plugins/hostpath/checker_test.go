package hostpath_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
)

// TestOneCheckPerPath: a check stuck on hung storage outlives the
// operation that started it; the retries of that path wait for it instead
// of each leaving one more checker stuck.
func TestOneCheckPerPath(t *testing.T) {
	dir := t.TempDir()
	block, starts := filepath.Join(dir, "block"), filepath.Join(dir, "starts")
	plugintest.WriteFile(t, block, "")
	// The checker counts its starts, then waits while block exists. The
	// wait runs in a subshell that outlives the kill at the deadline, as a
	// process stuck in the kernel would, and holds the output pipe open.
	script := `echo >>"$0/starts"; (while [ -e "$0/block" ]; do sleep 0.01; done) & wait`
	p := &hostpath.Plugin{Checker: []string{"/bin/sh", "-c", script, dir}}
	for _, want := range []string{"gave up waiting for storage", "an earlier check of /x has not returned"} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := p.SetUp(ctx, spec("/x", v1.HostPathDirectory), "")
		cancel()
		checkErr(t, err, want, "/x")
	}
	if n := strings.Count(plugintest.ReadFile(t, starts), "\n"); n != 1 {
		t.Fatalf("%d checkers started, want 1", n)
	}
	if err := os.Remove(block); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SetUp(context.Background(), spec("/x", v1.HostPathDirectory), ""); err != nil {
		t.Fatalf("SetUp once the storage answers: %v", err)
	}
	if n := strings.Count(plugintest.ReadFile(t, starts), "\n"); n != 2 {
		t.Fatalf("%d checkers started, want 2", n)
	}
}
