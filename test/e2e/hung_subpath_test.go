package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Hung storage costs its own volume, never the node: subPaths on a file
// system that stops answering below the volume cost no thread of the
// agent however often they are retried, and hostPaths that hang delay a
// healthy hostPath by no more than the checkers' own deadline.

// subPathCount is how many subPath mounts each pod of subPathsPod has, as
// in the issue (30).
const subPathCount = 30

// checkDeadline is each check's and each subPath open's own deadline in
// the agent's checker processes (procpool.DefaultRequestTimeout).
const checkDeadline = 5 * time.Second

// threadSlack bounds how many threads the agent may gain while hung pods
// are retried: the Go runtime keeps a thread for each blocking system
// call that ran at once (mounts, forks of the checkers), up to the
// executor's 16 operations, plus a few of its own.
const threadSlack = 24

// subPathsPod is a pod whose container mounts subPathCount subPaths of a
// hostPath volume.
func subPathsPod(name, host string) string {
	var mounts strings.Builder
	for i := range subPathCount {
		fmt.Fprintf(&mounts, "    - {name: host, mountPath: /m%d, subPath: s%d}\n", i, i)
	}
	return fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  containers:
  - name: c
    image: busybox
    volumeMounts:
%s  volumes:
  - {name: host, hostPath: {path: %q, type: Directory}}
`, name, mounts.String(), host)
}

// threads is the number of threads of process pid.
func threads(t *testing.T, pid int) int {
	t.Helper()
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no Threads in /proc/%d/status", pid)
	return 0
}

// readyTimes adds a pod of podOf for each name, one after the other, and
// returns the median of the times each took to be ready.
func readyTimes(t *testing.T, a *agent, podOf func(name string) string, names ...string) time.Duration {
	t.Helper()
	var took []time.Duration
	for _, name := range names {
		start := time.Now()
		a.writeManifest(name+".yaml", podOf(name))
		a.waitPod("default", name, 60*time.Second, ready)
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("ready times of %v: %v", names, took)
	return took[len(took)/2]
}

// hungSubPathsFor is how long TestHungSubPathsCostNoThread keeps the hung
// pods retrying: past the operations' 2-minute deadline, after which the
// agent of a5916f5 left a thread per subPath per retry.
// E2E_HUNG_SUBPATHS_SECONDS changes it.
const hungSubPathsSeconds = 135

// TestHungSubPathsCostNoThread: 3 pods × 30 subPaths of a hostPath whose
// file system never answers a look-up below the volume (the hostPath
// check passes) are retried for 135 s; the agent's thread count stays
// within threadSlack of what it was before, one checker at most is stuck
// on the volume, and healthy pods of the same shape added meanwhile are
// ready about as fast as before (median of 3 ≤ 1.5 × the median of 3
// before, plus 1 s for the noise of a shared machine); SIGTERM still ends
// the agent within 10 s. The agent of a5916f5 had 96 threads (8 before)
// 2 minutes in.
func TestHungSubPathsCostNoThread(t *testing.T) {
	a := newAgent(t)
	fs := mountHangFS(t, t.TempDir())
	fs.hangBelowData()
	healthyHost := t.TempDir()
	a.start()
	pid := a.cmd.Process.Pid
	healthy := func(name string) string { return subPathsPod(name, healthyHost) }
	hungSubPathsFor := time.Duration(envUint(t, "E2E_HUNG_SUBPATHS_SECONDS", hungSubPathsSeconds)) * time.Second

	before := readyTimes(t, a, healthy, "healthy-0", "healthy-1", "healthy-2")
	base := threads(t, pid)
	start := time.Now()
	for i := range 3 {
		name := fmt.Sprintf("hung-%d", i)
		a.writeManifest(name+".yaml", subPathsPod(name, filepath.Join(fs.dir, "data")))
	}
	waitFor(t, 30*time.Second, "a subPath open blocked on the hung file system", func() (bool, string) {
		return fs.blockedBy(pid) > 0, ""
	})
	most := base
	sample := func() {
		n := threads(t, pid)
		most = max(most, n)
		if n > base+threadSlack {
			t.Fatalf("the agent has %d threads %v after the hung pods came, %d before: want at most %d more", n, time.Since(start).Round(time.Second), base, threadSlack)
		}
	}
	for time.Since(start) < hungSubPathsFor/2 {
		sample()
		time.Sleep(time.Second)
	}
	during := readyTimes(t, a, healthy, "healthy-3", "healthy-4", "healthy-5")
	for time.Since(start) < hungSubPathsFor {
		sample()
		time.Sleep(time.Second)
	}
	t.Logf("FIGURE agent threads, most while 3 pods × 30 subPaths hang: %d (%d before)", most, base)
	if limit := before*3/2 + time.Second; during > limit {
		t.Errorf("healthy pods took %v (median) to be ready with the hung pods, %v before: want at most %v", during, before, limit)
	}
	attempts := strings.Count(a.logs.String(), `"subPath":"s0"`)
	t.Logf("FIGURE failed preparations of the hung pods' subPath s0 in %v: %d", hungSubPathsFor, attempts)
	if attempts < 3*4 {
		t.Errorf("the hung pods' subPaths were tried %d times in %v; want at least 4 retries per pod", attempts, hungSubPathsFor)
	}
	if n := fs.blockedBy(pid); n > 3 {
		t.Errorf("%d look-ups of the agent or its checkers blocked on the hung volume; want one per pod at most (3)", n)
	}
	for i := range 3 {
		p := mustPod(t, a, fmt.Sprintf("hung-%d", i))
		if p.Ready {
			t.Errorf("pod %s is ready with its subPaths on hung storage", p.Name)
		}
	}
	figure(t, "SIGTERM to exit, subPaths hung", stopWithin(t, a))
}

// hungHostPathPod is a pod with a hostPath volume of type Directory.
func hungHostPathPod(name, host string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: host, hostPath: {path: %q, type: Directory}}
`, name, host)
}

// TestHungHostPathsDelayNoOther: two hostPaths inside a file system that
// never answers hold their checkers; a healthy hostPath pod added then is
// ready within the checkers' own deadline (5 s) plus its time without
// them (the median of 3 pods before), plus 2 s for the noise of a shared
// machine. Then six more hung hostPaths (eight) and a healthy pod added
// right after them: the same bound.
func TestHungHostPathsDelayNoOther(t *testing.T) {
	a := newAgent(t)
	fs := mountHangFS(t, t.TempDir())
	a.start()
	pid := a.cmd.Process.Pid
	healthy := func(name string) string { return hungHostPathPod(name, t.TempDir()) }
	normal := readyTimes(t, a, healthy, "healthy-0", "healthy-1", "healthy-2")
	limit := checkDeadline + normal + 2*time.Second

	fs.hang()
	hangs := func(from, to int) {
		for i := from; i < to; i++ {
			name := fmt.Sprintf("hung-%d", i)
			a.writeManifest(name+".yaml", hungHostPathPod(name, filepath.Join(fs.dir, name)))
		}
	}
	hangs(0, 2)
	waitFor(t, 30*time.Second, "both hung checks blocked", func() (bool, string) {
		return fs.blockedBy(pid) >= 2, strconv.Itoa(fs.blockedBy(pid))
	})
	if took := readyTimes(t, a, healthy, "healthy-3"); took > limit {
		t.Errorf("a healthy hostPath pod took %v to be ready behind 2 hung ones; want at most %v", took, limit)
	}
	hangs(2, 8)
	time.Sleep(100 * time.Millisecond) // the agent has read them first
	if took := readyTimes(t, a, healthy, "healthy-4"); took > limit {
		t.Errorf("a healthy hostPath pod took %v to be ready behind 8 hung ones; want at most %v", took, limit)
	}
	waitFor(t, 30*time.Second, "the 8 hung checks blocked", func() (bool, string) {
		return fs.blockedBy(pid) >= 8, strconv.Itoa(fs.blockedBy(pid))
	})
	for i := range 8 {
		checkHung(t, mustPod(t, a, fmt.Sprintf("hung-%d", i)))
	}
	figure(t, "SIGTERM to exit, 8 hostPaths hung", stopWithin(t, a))
}
