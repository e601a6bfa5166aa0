package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 27: nothing is destroyed or handed to a new owner without
// evidence. One test per finding.

// startScratch starts a with pod default/name of scratchPod, ready, with a
// marker file in its emptyDir; it returns the pod and the marker's path.
func startScratch(a *agent, name string) (apiPod, string) {
	a.t.Helper()
	a.writeManifest(name+".yaml", scratchPod(name))
	a.start()
	return a.marked(name)
}

// Finding 2: a second agent given the same --root-dir is refused, naming
// the first agent's PID, and the first agent's pods keep their data.
func TestSecondAgentOnTheSameRootIsRefused(t *testing.T) {
	a := newAgent(t)
	p, file := startScratch(a, "web")
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "other.yaml"), []byte(scratchPod("other")), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "--manifests", other, "--root-dir", a.root, "--node-name", "node-1", "--status-addr", freeAddr(t))
	start := time.Now()
	out, err := cmd.CombinedOutput()
	want := fmt.Sprintf("--root-dir %s is in use by process %d", a.resolvedRoot(), a.cmd.Process.Pid)
	if err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("second agent on the same root: %v after %v\n%s\nwant a refusal containing %q", err, time.Since(start), tail(string(out), 20), want)
	}
	checkFile(t, file, "web")
	if now, ok := a.pod("default", "web"); !ok || !now.Ready || now.UID != p.UID {
		t.Fatalf("the first agent's pod after the refusal: %+v", now)
	}
}
