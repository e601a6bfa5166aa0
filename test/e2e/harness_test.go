// Package e2e drives the built volume-agent binary only through its public
// surfaces: manifest files, flags, signals and the HTTP status API. Tests
// need root (they mount real tmpfs); without it they skip.
package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	nfstest "github.com/volume-agent/volume-agent/test/nfs"
)

var (
	binary    string // path of the built agent, set by TestMain
	nfsHelper string // the test mount.nfs (test/nfs), set by TestMain
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "volume-agent-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil { // other users run it too
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	binary = filepath.Join(dir, "volume-agent")
	build := exec.Command("go", "build", "-o", binary, "../../cmd/volume-agent")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build volume-agent: %v\n%s", err, out)
		return 1
	}
	if nfsHelper, err = nfstest.BuildMountHelper(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("end-to-end tests need root: the agent mounts real tmpfs volumes")
	}
}

// agent is a running volume-agent process.
type agent struct {
	t         *testing.T
	root      string // --root-dir
	manifests string // --manifests
	addr      string
	args      []string
	extra     []string // the flags start was given beyond the defaults
	cmd       *exec.Cmd
	logs      *syncBuffer
	exited    chan struct{}
	exitErr   error
	// user, when set, runs the agent as another user.
	user *syscall.Credential
	// env is added to the agent's environment.
	env []string
	// socket, when set, is the path of the status endpoint's unix socket;
	// addr then serves /healthz and /readyz only (--healthz-addr).
	socket string
	// ns, when set, is the private mount namespace the agent runs in (with
	// the test mount.nfs): its mounts are seen through ns.Path and
	// ns.Mounts only.
	ns *nfstest.Namespace
}

// newAgent prepares an agent with fresh root and manifest directories.
func newAgent(t *testing.T) *agent {
	needRoot(t)
	a := &agent{t: t, root: t.TempDir(), manifests: t.TempDir()}
	t.Cleanup(a.cleanup)
	return a
}

// start runs the agent and waits until /healthz answers.
func (a *agent) start(extra ...string) {
	a.t.Helper()
	a.addr = freeAddr(a.t)
	endpoints := []string{"--status-addr", a.addr}
	if a.socket != "" {
		endpoints = []string{"--status-addr", "unix://" + a.socket, "--healthz-addr", a.addr}
	}
	args := append(append([]string{"--manifests", a.manifests, "--root-dir", a.root}, endpoints...),
		append([]string{"--node-name", "node-1", "--log-format", "json", "--log-level", "debug"}, extra...)...)
	a.args, a.extra = args, extra
	a.logs = &syncBuffer{}
	a.cmd = exec.Command(binary, args...)
	if a.ns != nil {
		a.cmd = a.ns.Command(binary, args...)
	}
	a.cmd.Stdout, a.cmd.Stderr = a.logs, a.logs
	if a.cmd.Env == nil {
		a.cmd.Env = os.Environ()
	}
	a.cmd.Env = append(a.cmd.Env, a.env...)
	// The agent dies with the test process: a killed `go test` leaves no
	// agent behind.
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: a.user, Pdeathsig: syscall.SIGKILL}
	if err := a.cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	a.exited = make(chan struct{})
	go func() { a.exitErr = a.cmd.Wait(); close(a.exited) }()
	waitFor(a.t, 10*time.Second, "agent /healthz", func() (bool, string) {
		code, body := a.get("/healthz")
		return code == http.StatusOK, body
	})
}

// stop sends SIGTERM and returns the exit error (nil for exit code 0).
func (a *agent) stop() error {
	a.t.Helper()
	if a.cmd == nil {
		return nil
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(30 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
		a.t.Errorf("agent did not exit within 30s of SIGTERM")
	}
	a.cmd = nil
	return a.exitErr
}

// waitPodDirGone waits until the pod's directory is removed (its teardown
// is complete).
func (a *agent) waitPodDirGone(uid string) {
	a.t.Helper()
	waitFor(a.t, 15*time.Second, "pod "+uid+" torn down", func() (bool, string) {
		_, err := os.Stat(filepath.Join(a.root, "pods", uid))
		return os.IsNotExist(err), fmt.Sprint(err, mountsUnder(a.t, a.root))
	})
}

// resolvedRoot is the root dir as the kernel's mount table names it.
func (a *agent) resolvedRoot() string {
	a.t.Helper()
	root, err := filepath.EvalSymlinks(a.root)
	if err != nil {
		a.t.Fatal(err)
	}
	return root
}

// kill sends SIGKILL, as a crash or an OOM kill would, and waits for the
// process to end.
func (a *agent) kill() {
	a.t.Helper()
	if a.cmd == nil {
		return
	}
	_ = a.cmd.Process.Kill()
	<-a.exited
	a.cmd = nil
}

// restart stops the agent with SIGTERM (or SIGKILL when crash is set) and
// starts it again with the same flags.
func (a *agent) restart(crash bool) {
	a.t.Helper()
	if crash {
		a.kill()
	} else if err := a.stop(); err != nil {
		a.t.Fatalf("agent exit after SIGTERM: %v, want code 0", err)
	}
	a.start(a.extra...)
}

// cleanup stops the agent and unmounts whatever is left under the root, so
// that one test's mounts never outlive it.
func (a *agent) cleanup() {
	if err := a.stop(); err != nil {
		a.t.Errorf("agent exit: %v", err)
	}
	if a.t.Failed() && a.logs != nil {
		a.t.Logf("agent logs:\n%s", tail(a.logs.String(), 80))
	}
	root := a.root
	if resolved, err := filepath.EvalSymlinks(root); err == nil {
		root = resolved // the kernel's mount table has the resolved path
	}
	for _, m := range mountsUnder(a.t, root) {
		_ = exec.Command("umount", "-l", m).Run()
	}
}

// get returns the status code and body of GET path.
func (a *agent) get(path string) (int, string) {
	resp, err := http.Get("http://" + a.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// apiPod is a pod as served by /v1/pods.
type apiPod struct {
	UID       string      `json:"uid"`
	Namespace string      `json:"namespace"`
	Name      string      `json:"name"`
	Ready     bool        `json:"ready"`
	State     string      `json:"state"`
	Reason    string      `json:"reason"`
	Volumes   []apiVolume `json:"volumes"`
}

type apiVolume struct {
	Name   string `json:"name"`
	Plugin string `json:"plugin"`
	Path   string `json:"path"`
	State  string `json:"state"`
	Error  string `json:"error"`
	Claim  string `json:"claim"`
	PV     string `json:"pv"`
	NoSwap *bool  `json:"noSwap"`
	// Mode is "Block" for a volume whose device is published at Path.
	Mode string `json:"mode"`
	// Since is when the agent first saw the volume in its state.
	Since    time.Time    `json:"since"`
	SubPaths []apiSubPath `json:"subPaths"`
}

// apiSubPath is one subPath mount of a volume in /v1/pods.
type apiSubPath struct {
	Container string `json:"container"`
	Index     int    `json:"index"`
	SubPath   string `json:"subPath"`
	Path      string `json:"path"`
	Error     string `json:"error"`
}

func (p apiPod) volume(name string) apiVolume {
	for _, v := range p.Volumes {
		if v.Name == name {
			return v
		}
	}
	return apiVolume{}
}

// pods returns /v1/pods.
func (a *agent) pods() []apiPod {
	a.t.Helper()
	code, body := a.get("/v1/pods")
	if code != http.StatusOK {
		a.t.Fatalf("/v1/pods: %d %s", code, body)
	}
	var out struct{ Pods []apiPod }
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		a.t.Fatalf("/v1/pods: %v: %s", err, body)
	}
	return out.Pods
}

// pod returns the pod namespace/name from /v1/pods.
func (a *agent) pod(namespace, name string) (apiPod, bool) {
	for _, p := range a.pods() {
		if p.Namespace == namespace && p.Name == name {
			return p, true
		}
	}
	return apiPod{}, false
}

// waitPod waits until cond holds for pod namespace/name and returns it.
func (a *agent) waitPod(namespace, name string, timeout time.Duration, cond func(apiPod) bool) apiPod {
	a.t.Helper()
	var p apiPod
	waitFor(a.t, timeout, "pod "+namespace+"/"+name, func() (bool, string) {
		var ok bool
		p, ok = a.pod(namespace, name)
		js, _ := json.Marshal(p)
		return ok && cond(p), string(js)
	})
	return p
}

func ready(p apiPod) bool { return p.Ready }

// writeManifest writes a manifest file atomically (write to temp, rename),
// as an editor does.
func (a *agent) writeManifest(name, content string) {
	a.t.Helper()
	tmp := filepath.Join(a.manifests, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		a.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(a.manifests, name)); err != nil {
		a.t.Fatal(err)
	}
}

func (a *agent) removeManifest(name string) {
	a.t.Helper()
	if err := os.Remove(filepath.Join(a.manifests, name)); err != nil {
		a.t.Fatal(err)
	}
}

// waitFor polls cond every 10 ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < timeout {
		ok, detail := cond()
		if ok {
			return time.Since(start)
		}
		last = detail
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s; last: %s", timeout, what, last)
	return 0
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// mountsUnder lists mount points at or below dir, from /proc/self/mountinfo.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, m := range readMountinfo(t) {
		if m.point == dir || strings.HasPrefix(m.point, dir+"/") {
			out = append(out, m.point)
		}
	}
	return out
}

type mountEntry struct {
	id, point, fstype, superOpts string
}

func readMountinfo(t *testing.T) []mountEntry {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []mountEntry
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.Fields(line)
		sep := indexOf(f, "-")
		if sep < 0 || len(f) < sep+4 {
			continue
		}
		out = append(out, mountEntry{id: f[0], point: f[4], fstype: f[sep+1], superOpts: f[sep+3]})
	}
	return out
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// syncBuffer collects process output safely.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
