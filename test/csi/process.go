package csi

import (
	"testing"

	"github.com/volume-agent/volume-agent/test/internal/proc"
)

// Process is one program of All running on the host, its output in a log
// file, killed by the test's cleanup.
type Process = proc.Process

// Run starts the program b with args (env added to the test's environment)
// on the host, logging into a file of the test's temporary directory, and
// registers a cleanup that kills it (and logs the tail of its log when the
// test failed).
func Run(t testing.TB, b Binary, env []string, args ...string) *Process {
	t.Helper()
	p, err := proc.Start(b.Name, Path(t, b), t.TempDir()+"/"+b.Name+".log", env, args)
	if err != nil {
		t.Fatalf("csi: %v", err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("csi: last lines of the %s log:\n%s", p.Name, p.Tail(40))
		}
	})
	return p
}
