package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// agent is one volume-agent process, driven and measured from outside: its
// flags, signals, files and HTTP API only.
type agent struct {
	r         *runner
	binary    string
	self      string // this program, for the mount-namespace child
	root      string // --root-dir
	manifests string // --manifests, empty in cluster mode
	addr      string
	extra     []string // further flags
	binds     int      // unrelated bind mounts to create in a private mount namespace first
	logFile   string
	cmd       *exec.Cmd
	exited    chan struct{}
	client    *http.Client
}

// agentConfig says how to start an agent.
type agentConfig struct {
	binary, self string
	manifests    string // manifest mode when set
	kubeconfig   string // cluster mode when set
	node         string
	binds        int
	rootParent   string // where the --root-dir is made; "" for the temporary directory
	logDir       string // "" for a temporary one
	logLevel     string
	args         []string // more flags (-agent-args)
	// profiling serves /debug/pprof (for -profile-dir); off otherwise, as
	// deployed: heap-profile sampling alone keeps 1.4 MiB.
	profiling bool
}

func newAgent(r *runner, c agentConfig) *agent {
	a := &agent{r: r, binary: c.binary, self: c.self, root: r.tempDirIn(c.rootParent), manifests: c.manifests, binds: c.binds}
	logDir := c.logDir
	if logDir == "" {
		logDir = r.TempDir()
	}
	a.logFile = filepath.Join(logDir, fmt.Sprintf("agent-%s.log", time.Now().Format("150405.000")))
	a.extra = []string{"--node-name", c.node, "--log-level", c.logLevel, "--log-format", "json"}
	if c.profiling {
		a.extra = append(a.extra, "--profiling")
	}
	if c.manifests != "" {
		a.extra = append(a.extra, "--manifests", c.manifests)
	}
	if c.kubeconfig != "" {
		a.extra = append(a.extra, "--kubeconfig", c.kubeconfig)
	}
	a.extra = append(a.extra, c.args...)
	a.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4096, MaxConnsPerHost: 0, DisableCompression: true}}
	r.Cleanup(a.cleanup)
	return a
}

// start runs the agent and waits until /healthz answers; it returns when
// it started.
func (a *agent) start() time.Time {
	if a.addr == "" {
		a.addr = freeAddr(a.r)
	}
	args := append([]string{"--root-dir", a.root, "--status-addr", a.addr}, a.extra...)
	name := a.binary
	if a.binds > 0 {
		// The child enters a private mount namespace, makes the bind
		// mounts there and becomes the agent: the host's mount table is
		// never changed, and the agent's mounts die with it.
		args = append([]string{childFlag, strconv.Itoa(a.binds), a.r.TempDir(), a.binary}, args...)
		name = a.self
	}
	log, err := os.OpenFile(a.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		a.r.Fatalf("agent log: %v", err)
	}
	defer log.Close()
	a.cmd = exec.Command(name, args...)
	a.cmd.Stdout, a.cmd.Stderr = log, log
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := time.Now()
	if err := a.cmd.Start(); err != nil {
		a.r.Fatalf("start agent: %v", err)
	}
	a.exited = make(chan struct{})
	go func() { _ = a.cmd.Wait(); close(a.exited) }()
	a.waitFor(60*time.Second, "/healthz", func() bool { code, _ := a.get("/healthz"); return code == http.StatusOK })
	return started
}

// waitFor polls cond every millisecond until it holds.
func (a *agent) waitFor(timeout time.Duration, what string, cond func() bool) {
	deadline := time.Now().Add(timeout)
	for !cond() {
		select {
		case <-a.exited:
			a.r.Fatalf("agent exited while waiting for %s; log:\n%s", what, a.logTail())
		default:
		}
		if time.Now().After(deadline) {
			a.r.Fatalf("agent: no %s within %v; log:\n%s", what, timeout, a.logTail())
		}
		time.Sleep(time.Millisecond)
	}
}

// stop sends sig and waits for the process to end.
func (a *agent) stop(sig syscall.Signal) {
	if a.cmd == nil {
		return
	}
	_ = a.cmd.Process.Signal(sig)
	select {
	case <-a.exited:
	case <-time.After(30 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
		a.r.Errorf("agent did not exit within 30 s of %v", sig)
	}
	a.cmd = nil
}

// cleanup stops the agent and detaches what it left mounted.
func (a *agent) cleanup() {
	a.stop(syscall.SIGTERM)
	detachUnder(a.root)
}

// detachUnder detaches every mount under dir, deepest first.
func detachUnder(dir string) {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		_ = unix.Unmount(mounts[i].Mountpoint, unix.MNT_DETACH)
	}
}

func (a *agent) pid() int { return a.cmd.Process.Pid }

func (a *agent) url(path string) string { return "http://" + a.addr + path }

// get returns the status code and body of a GET (0 when it failed).
func (a *agent) get(path string) (int, []byte) {
	resp, err := a.client.Get(a.url(path))
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// waitReady asks the agent to answer once pod uid is ready, as a container
// runtime would, and returns when it did.
func (a *agent) waitReady(ctx context.Context, uid string, timeout time.Duration) (time.Time, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.url("/v1/pods/"+uid+"?wait="+timeout.String()), nil)
	if err != nil {
		return time.Time{}, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return time.Time{}, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	done := time.Now()
	if resp.StatusCode != http.StatusOK {
		return done, fmt.Errorf("pod %s: %s", uid, resp.Status)
	}
	return done, nil
}

// apiPod is a pod of /v1/pods.
type apiPod struct {
	UID     string `json:"uid"`
	Ready   bool   `json:"ready"`
	Volumes []struct {
		Name  string `json:"name"`
		Path  string `json:"path"`
		State string `json:"state"`
		Error string `json:"error"`
		Usage *struct {
			Time time.Time `json:"time"`
		} `json:"usage"`
	} `json:"volumes"`
}

// pods returns /v1/pods.
func (a *agent) pods() []apiPod {
	code, body := a.get("/v1/pods")
	if code != http.StatusOK {
		a.r.Fatalf("/v1/pods: %d %s", code, body)
	}
	var out struct{ Pods []apiPod }
	if err := json.Unmarshal(body, &out); err != nil {
		a.r.Fatalf("/v1/pods: %v", err)
	}
	return out.Pods
}

// metric sums the samples of a counter or gauge whose line starts with
// prefix (name and labels).
func (a *agent) metric(prefix string) float64 {
	_, body := a.get("/metrics")
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		fields := strings.Fields(line)
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

func (a *agent) logTail() string {
	b, _ := os.ReadFile(a.logFile)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// profile fetches a CPU profile of d into file, in the background; the
// returned function waits for it.
func (a *agent) profile(d time.Duration, file string) func() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.save(fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds())), file)
	}()
	time.Sleep(50 * time.Millisecond) // let the profile start
	return func() { <-done }
}

// save writes what GET path answers to file (a profile).
func (a *agent) save(path, file string) {
	{
		resp, err := a.client.Get(a.url(path))
		if err != nil {
			a.r.Logf("profile %s: %v", file, err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(file)
		if err != nil {
			a.r.Logf("profile %s: %v", file, err)
			return
		}
		defer f.Close()
		_, _ = io.Copy(f, resp.Body)
	}
}

func freeAddr(r *runner) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitSynced waits for /readyz 200: the agent has read its sources once.
// Pods written before that first read would be files "changed just before
// start", which the manifest source holds back for 0.75 s (they may be
// half-written), and would measure that wait instead of the agent.
func (a *agent) waitSynced() {
	a.waitFor(time.Minute, "/readyz 200", func() bool { code, _ := a.get("/readyz"); return code == http.StatusOK })
}
