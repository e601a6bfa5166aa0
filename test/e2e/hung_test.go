package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/volume-agent/volume-agent/internal/plugins/emptydir"
)

// Hung storage blocks only its own volume: other pods still mount, /healthz
// and /v1/pods answer within a second, and SIGTERM ends the process within
// ten seconds. The storage is a FUSE file system whose server reads requests
// and never answers them (hangFS), the hardest kind of hang: a process
// waiting on such a request cannot be killed until the server answers.

const (
	endpointBound = time.Second      // the most an endpoint may take
	exitBound     = 10 * time.Second // the most SIGTERM to exit may take
)

const webPod = `
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: scratch, emptyDir: {}}
  - {name: cache, emptyDir: {medium: Memory}}
  - {name: config, configMap: {name: app-config}}
  - {name: creds, secret: {secretName: app-creds}}
`

const hostPathPod = `
apiVersion: v1
kind: Pod
metadata: {name: stuck}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: host, hostPath: {path: %s, type: Directory}}
  - {name: scratch, emptyDir: {}}
`

// TestHungHostPathBlocksOnlyItsVolume: a hostPath volume inside a FUSE
// file system that hangs before the agent looks at it stays Pending; the
// other pods become ready, the endpoints answer, and SIGTERM ends the agent.
func TestHungHostPathBlocksOnlyItsVolume(t *testing.T) {
	a := newAgent(t)
	fs := mountHangFS(t, t.TempDir())
	fs.hang()
	a.writeManifest("config.yaml", fmt.Sprintf(appConfig, "color=blue"))
	a.writeManifest("secret.yaml", appSecret)
	a.writeManifest("stuck.yaml", fmt.Sprintf(hostPathPod, filepath.Join(fs.dir, "data")))
	a.writeManifest("web.yaml", fmt.Sprintf(webPod, "web"))
	a.start()
	stopProbe := probe(t, a)
	pid := a.cmd.Process.Pid

	a.waitPod("default", "web", 10*time.Second, ready)
	waitFor(t, 10*time.Second, "the agent's check blocked on the hung file system", func() (bool, string) {
		return fs.blockedBy(pid) > 0, ""
	})
	a.writeManifest("web2.yaml", fmt.Sprintf(webPod, "web2"))
	a.waitPod("default", "web2", 10*time.Second, ready)
	checkHung(t, a.waitPod("default", "stuck", time.Second, func(p apiPod) bool {
		return p.volume("scratch").State == "Mounted"
	}))
	time.Sleep(time.Second) // the endpoints keep answering while it hangs
	checkHung(t, mustPod(t, a, "stuck"))
	figure(t, "slowest endpoint answer, hostPath hung", stopProbe())

	figure(t, "SIGTERM to exit, hostPath hung", stopWithin(t, a))
}

// TestHungMountInsideEmptyDir: a FUSE file system mounted inside a pod's
// emptyDir (as a container with Bidirectional propagation can do) hangs,
// and the pod goes. The teardown refuses to cross the mount and never
// touches it; other pods keep being served, across a restart too.
func TestHungMountInsideEmptyDir(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("config.yaml", fmt.Sprintf(appConfig, "color=blue"))
	a.writeManifest("secret.yaml", appSecret)
	a.writeManifest("web.yaml", fmt.Sprintf(webPod, "web"))
	a.writeManifest("pod.yaml", fmt.Sprintf(twoVolumePod, "  - {name: data, emptyDir: {}}\n"))
	a.start()
	a.waitPod("default", "web", 10*time.Second, ready)
	p := a.waitPod("default", "keeper", 10*time.Second, ready)
	mnt := filepath.Join(p.volume("data").Path, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	fs := mountHangFS(t, mnt)
	fs.hang()
	stopProbe := probe(t, a)
	pids := []int{a.cmd.Process.Pid}

	a.removeManifest("pod.yaml")
	waitRefused(t, a)
	a.writeManifest("late.yaml", fmt.Sprintf(webPod, "late"))
	a.waitPod("default", "late", 10*time.Second, ready)
	time.Sleep(time.Second) // the endpoints keep answering while it hangs
	figure(t, "slowest endpoint answer, mount hung in an emptyDir", stopProbe())
	figure(t, "SIGTERM to exit, mount hung in an emptyDir", stopWithin(t, a))

	// At start the agent rebuilds its state from the root directory,
	// where the hung mount is.
	start := time.Now()
	a.start(a.extra...)
	figure(t, "start to /healthz, mount hung in an emptyDir", time.Since(start))
	stopProbe = probe(t, a)
	pids = append(pids, a.cmd.Process.Pid)
	a.waitPod("default", "web", 10*time.Second, ready)
	a.waitPod("default", "late", 10*time.Second, ready)
	waitRefused(t, a)
	time.Sleep(time.Second)
	figure(t, "slowest endpoint answer after a restart, mount hung in an emptyDir", stopProbe())
	figure(t, "SIGTERM to exit after a restart, mount hung in an emptyDir", stopWithin(t, a))

	for _, pid := range pids {
		if n := fs.blockedBy(pid); n > 0 {
			t.Errorf("agent process %d sent %d requests to the hung file system; want none", pid, n)
		}
	}
	if !isMountPoint(t, mnt) {
		t.Error("the mount inside the volume is gone")
	}
}

// waitRefused waits until the agent refuses to tear down the volume that
// holds the hung mount.
func waitRefused(t *testing.T, a *agent) {
	t.Helper()
	waitFor(t, 10*time.Second, "the teardown refused", func() (bool, string) {
		return strings.Contains(a.logs.String(), "mount points remain"), ""
	})
}

// checkHung checks that the stuck pod's hostPath volume is not set up.
func checkHung(t *testing.T, p apiPod) {
	t.Helper()
	if v := p.volume("host"); v.State == "Mounted" || p.Ready {
		t.Errorf("pod %s on hung storage: ready %v, volume %+v; want its hostPath volume not Mounted", p.Name, p.Ready, v)
	}
}

func mustPod(t *testing.T, a *agent, name string) apiPod {
	t.Helper()
	p, ok := a.pod("default", name)
	if !ok {
		t.Fatalf("pod %s missing from /v1/pods", name)
	}
	return p
}

// probe asks for /healthz and /v1/pods in turn, every 100 ms, until the
// returned function is called (or the test ends). That function checks
// that every answer was a 200 within endpointBound and returns the slowest
// answer's time.
func probe(t *testing.T, a *agent) func() time.Duration {
	client := &http.Client{Timeout: 5 * endpointBound}
	addr := a.addr
	var (
		slowest time.Duration
		asked   int
		failed  []string
	)
	done, stopped := make(chan struct{}), make(chan struct{})
	stop := sync.OnceFunc(func() { close(done); <-stopped })
	t.Cleanup(stop)
	go func() {
		defer close(stopped)
		for {
			for _, path := range []string{"/healthz", "/v1/pods"} {
				start := time.Now()
				resp, err := client.Get("http://" + addr + path)
				took := time.Since(start)
				asked++
				slowest = max(slowest, took)
				switch {
				case err != nil:
					failed = append(failed, fmt.Sprintf("GET %s: %v after %v", path, err, took))
					continue
				case resp.StatusCode != http.StatusOK || took > endpointBound:
					failed = append(failed, fmt.Sprintf("GET %s: %d after %v", path, resp.StatusCode, took))
				}
				resp.Body.Close()
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() time.Duration {
		t.Helper()
		stop()
		for _, f := range failed {
			t.Errorf("%s; want 200 within %v", f, endpointBound)
		}
		if asked < 10 {
			t.Errorf("the endpoints were asked only %d times", asked)
		}
		return slowest
	}
}

// stopWithin sends SIGTERM and checks that the process ends with code 0
// within exitBound. It returns the time the process took. On failure it
// leaves the process to the test's cleanups, which answer the hung
// requests first.
func stopWithin(t *testing.T, a *agent) time.Duration {
	t.Helper()
	start := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.exited:
	case <-time.After(exitBound):
		t.Fatalf("the agent did not exit within %v of SIGTERM; its threads:\n%s", exitBound, kernelStacks(a.cmd.Process.Pid))
	}
	took := time.Since(start)
	a.cmd = nil
	if a.exitErr != nil {
		t.Fatalf("agent exit after SIGTERM: %v, want code 0", a.exitErr)
	}
	return took
}

// kernelStacks describes where each thread of process pid waits in the
// kernel.
func kernelStacks(pid int) string {
	var b strings.Builder
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	for _, task := range tasks {
		stat, _ := os.ReadFile(filepath.Join(task, "stat"))
		stack, _ := os.ReadFile(filepath.Join(task, "stack"))
		// The state follows the command name, which is in parentheses.
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && strings.HasPrefix(string(stat[i+1:]), " D") {
			fmt.Fprintf(&b, "thread %s in D state:\n%s", filepath.Base(task), stack)
		}
	}
	return b.String()
}

// TestLimiterAsksNothingOfAHungMount: whether the emptyDir Limiter may have
// made a volume's directory is asked before its teardown, when a hung mount
// may sit on that directory. The question is answered from the kernel's
// cached attributes alone (statx with AT_STATX_DONT_SYNC), so it sends the
// hung file system no request and returns; a plain lstat of the same
// directory, the control, does reach the server and blocks.
func TestLimiterAsksNothingOfAHungMount(t *testing.T) {
	mnt := t.TempDir()
	fs := mountHangFS(t, mnt)
	fs.hang()

	answered := make(chan bool, 1)
	go func() { answered <- emptydir.Btrfs{}.MayHaveMade(mnt) }()
	select {
	case made := <-answered:
		if made {
			t.Errorf("MayHaveMade(%s) = true for a FUSE mount point; want false (not a btrfs subvolume)", mnt)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("MayHaveMade(%s) still waiting on the hung file system after 30s", mnt)
	}
	if n := fs.blockedBy(os.Getpid()); n > 0 {
		t.Fatalf("MayHaveMade sent %d requests to the hung file system; want none", n)
	}

	// The control: without AT_STATX_DONT_SYNC the same question waits on
	// the server (it stays blocked until the test's cleanup answers it).
	go func() { _, _ = os.Lstat(mnt) }()
	waitFor(t, 30*time.Second, "lstat of the hung mount point to reach the server", func() (bool, string) {
		return fs.blockedBy(os.Getpid()) > 0, ""
	})
}
