package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/volume-agent/volume-agent/test/controlplane"
	"github.com/volume-agent/volume-agent/test/node"
)

// The kubelet scenario (-scenario kubelet, issue 21) runs the agent side by
// side with a real kubelet (test/node: kubelet, containerd, runc in their
// own mount and PID namespaces) registered under the same node name with
// the same control plane. Both set up the volumes of the same pods in the
// same burst: the agent as a host process in cluster mode, the kubelet in
// its node (where it also starts the containers).
//
// The agent's time for a pod runs from its create call to the answer of
// GET /v1/pods/<uid>?wait=; the kubelet's to the latest timestamp of the
// "MountVolume.SetUp succeeded" lines it logs at --v=1 for that pod's
// volumes. Teardown: delete call (grace period 0) → the pod's directory
// gone, the agent's <root>/pods/<uid> and the kubelet's
// /var/lib/kubelet/pods/<uid> on the node, both polled by the same loop.

// kubeletMix is a set of volumes every pod of a burst has.
type kubeletMix struct {
	Name     string `json:"name"`
	hostPath bool
	token    bool // keep the kube-api-access projected volume ServiceAccount admission adds
}

// volumes is how many volumes a pod of the mix has.
func (m kubeletMix) volumes() int {
	n := 3
	if m.hostPath {
		n++
	}
	if m.token {
		n++
	}
	return n
}

// short names the mix in file names.
func (m kubeletMix) short() string {
	s := "cm-secret-emptydir"
	if m.hostPath {
		s += "-hostpath"
	}
	if m.token {
		s += "-token"
	}
	return s
}

var kubeletMixes = []kubeletMix{
	{Name: "configMap + secret + emptyDir + hostPath", hostPath: true},
	{Name: "configMap + secret + emptyDir"},
	{Name: "configMap + secret + emptyDir + hostPath + kube-api-access (projected token)", hostPath: true, token: true},
}

// mixNames are the short names of kubeletMixes, as -mixes takes them.
func mixNames() []string {
	var names []string
	for _, m := range kubeletMixes {
		names = append(names, m.short())
	}
	return names
}

// parseMixes returns the mixes -mixes names (short names, comma-separated),
// in kubeletMixes' order; every mix when list is empty.
func parseMixes(list string) ([]kubeletMix, error) {
	if list == "" {
		return kubeletMixes, nil
	}
	want := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		if !slices.Contains(mixNames(), name) {
			return nil, fmt.Errorf("-mixes: unknown mix %q: want some of %s", name, strings.Join(mixNames(), ", "))
		}
		want[name] = true
	}
	var mixes []kubeletMix
	for _, m := range kubeletMixes {
		if want[m.short()] {
			mixes = append(mixes, m)
		}
	}
	return mixes, nil
}

// kubeletRound is one burst of one mix: what the agent and the kubelet
// took, and the CPU every component used meanwhile.
type kubeletRound struct {
	Round          int     `json:"round"`
	WithoutKubelet bool    `json:"without_kubelet,omitempty"` // the control: no node, the agent alone
	AgentIdentity  string  `json:"agent_identity"`            // node (the DaemonSet's: the kubelet's identity) or admin
	Mix            string  `json:"mix"`
	Pods           int     `json:"pods"`
	Agent          dist    `json:"agent_setup"`
	Kubelet        dist    `json:"kubelet_setup"`
	RatioP50       float64 `json:"kubelet_over_agent_p50"`
	RatioP99       float64 `json:"kubelet_over_agent_p99"`
	SetupWindowS   float64 `json:"setup_window_seconds"` // first create → both done
	SetupCPU       cpuUse  `json:"setup_cpu_seconds"`
	AgentShare     float64 `json:"agent_share_of_setup_cpu"` // the agent's part of the CPU the components (not "others") used in the window
	RunningS       float64 `json:"all_running_seconds"`      // first create → every pod Running (the kubelet's containers)
	AgentDown      dist    `json:"agent_teardown"`
	KubeletDown    dist    `json:"kubelet_teardown"`
	DownRatioP50   float64 `json:"teardown_kubelet_over_agent_p50"`
	TeardownWindow float64 `json:"teardown_window_seconds"`
	TeardownCPU    cpuUse  `json:"teardown_cpu_seconds"`
	LoadBefore     string  `json:"load_average_before"`
	// Alternate (-alternate): the kubelet's burst and the agent's were two,
	// each with the other idle; the fields above are the kubelet's burst's
	// (set-up window and CPU), these the agent's.
	Alternate           bool    `json:"alternate,omitempty"`
	AgentSetupWindowS   float64 `json:"agent_burst_setup_window_seconds,omitempty"`
	AgentSetupCPU       cpuUse  `json:"agent_burst_setup_cpu_seconds,omitempty"`
	AgentTeardownWindow float64 `json:"agent_burst_teardown_window_seconds,omitempty"`
	AgentTeardownCPU    cpuUse  `json:"agent_burst_teardown_cpu_seconds,omitempty"`

	agentLat, kubeletLat, agentDown, kubeletDown []time.Duration
}

// cpuUse is CPU seconds (user + system) by component.
type cpuUse map[string]float64

// Components, in table order. "others" is the rest of the machine's busy
// time (/proc/stat): processes this program did not start (another
// user's), the kernel's threads and interrupts.
var cpuComponents = []string{"agent", "kubelet", "containerd", "shims+runc+containers", "kube-apiserver", "etcd", "bench", "others"}

// sideBySide is the running setup of the scenario.
type sideBySide struct {
	r          *runner
	rep        *report
	a          *agent
	c          *apiServer
	client     kubernetes.Interface
	n          *node.Node
	nodeInit   int    // PID of the node's namespaces' init
	kubeletLog string // the kubelet's log file, on the host
	hostDir    string // hostPath volumes' parent, the same path for the host and the node
	pods       int
	profile    string       // directory for CPU profiles of the agent during each burst, or ""
	identity   string       // the agent's credentials: node or admin
	agentNode  string       // the agent's node with -alternate (agentNode), else ""
	pinned     []pinnedProc // long-lived processes every snapshot must have
	next       int
}

func kubeletScenario(r *runner, o options, rep *report, cfg agentConfig) {
	k := startSideBySide(r, o, rep, cfg)
	for round := range o.rounds {
		// Alternate the order of the mixes from round to round.
		mixes := slices.Clone(o.mixes)
		if round%2 == 1 {
			slices.Reverse(mixes)
		}
		for _, m := range mixes {
			if o.alternate {
				rep.Kubelet = append(rep.Kubelet, k.alternately(round, m))
				continue
			}
			rr := k.round(round, m, bothAtOnce)
			rep.Kubelet = append(rep.Kubelet, rr)
		}
	}
}

// startSideBySide starts the control plane, the node (unless
// -without-kubelet) and the agent for the same node name.
func startSideBySide(r *runner, o options, rep *report, cfg agentConfig) *sideBySide {
	cp := controlplane.Start(r, controlplane.Options{Logf: r.Logf})
	cp.CreateNamespace(r, namespace)
	config := cp.AdminConfig()
	config.QPS, config.Burst = 1000, 2000
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		r.Fatalf("client: %v", err)
	}
	k := &sideBySide{r: r, rep: rep, client: client, pods: o.pods, profile: o.profileDir, c: &apiServer{r: r, client: client, uids: map[string]string{}}}
	k.hostDir = r.TempDir()
	if o.withoutKubelet {
		// The control: the same bursts with the agent alone.
		if _, err := client.CoreV1().Nodes().Create(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: benchNode}}, metav1.CreateOptions{}); err != nil {
			r.Fatalf("node: %v", err)
		}
	} else {
		k.n = node.Start(r, cp, node.Options{Name: benchNode, Logf: r.Logf})
		// n.Path is /proc/<init>/root/...: the node's init is our way in.
		if _, err := fmt.Sscanf(k.n.Path("/"), "/proc/%d/root", &k.nodeInit); err != nil {
			r.Fatalf("node init from %q: %v", k.n.Path("/"), err)
		}
		k.kubeletLog = k.findKubeletLog()
		// /tmp is the host's in the node's mount namespace too (it binds
		// only /var/lib, /var/log and /run over the host's).
		if _, err := os.Stat(k.n.Path(k.hostDir)); err != nil {
			r.Fatalf("hostPath parent %s not seen by the node: %v", k.hostDir, err)
		}
	}
	if o.alternate {
		k.createAgentNode()
		cfg.node = agentNode
	}
	// The agent as the DaemonSet runs it, with the node's identity
	// (system:node:<name>, under the Node authorizer and NodeRestriction),
	// or with the admin's as the suite's cluster mode does.
	switch o.agentIdentity {
	case "node":
		cfg.kubeconfig = cp.NodeKubeconfig(r, cfg.node)
	case "admin":
		cfg.kubeconfig = cp.AdminKubeconfig()
	}
	k.identity = o.agentIdentity
	k.a = newAgent(r, cfg)
	k.a.start()
	k.a.waitSynced()
	return k
}

// findKubeletLog is the file the node's kubelet writes its log to.
func (k *sideBySide) findKubeletLog() string {
	procs := readProcs()
	nodeNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", k.nodeInit))
	if err != nil {
		k.r.Fatalf("node's PID namespace: %v", err)
	}
	for pid, p := range procs {
		// The kubelet runs under nsenter, in the node's PID namespace.
		if ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); p.comm == "kubelet" && ns == nodeNS {
			log, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/2", pid))
			if err != nil {
				k.r.Fatalf("kubelet log: %v", err)
			}
			return log
		}
	}
	k.r.Fatalf("no kubelet process in the PID namespace of the node's init %d", k.nodeInit)
	return ""
}

// kubeletPod returns a pod of mix m, with its own ConfigMap and Secret.
func (k *sideBySide) kubeletPod(m kubeletMix, name, nodeName string) (*v1.Pod, *v1.ConfigMap, *v1.Secret) {
	_, cm, sec := podObjects("", 0)
	cm.Name, cm.Data = name, map[string]string{"config": "value of " + name + "\n"}
	sec.Name, sec.Data = name, map[string][]byte{"password": []byte("s3cr3t-" + name)}
	vols := []v1.Volume{
		{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: ref(name)}}},
		{Name: "secret", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: name}}},
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	}
	if m.hostPath {
		dir := v1.HostPathDirectory
		vols = append(vols, v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{
			Path: filepath.Join(k.hostDir, name), Type: &dir}}})
	}
	// The kubelet sets up only the volumes a container mounts.
	var mounts []v1.VolumeMount
	for _, v := range vols {
		mounts = append(mounts, v1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name})
	}
	zero := int64(0)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app": "bench"}},
		Spec: v1.PodSpec{
			NodeName:                      nodeName,
			AutomountServiceAccountToken:  &m.token,
			TerminationGracePeriodSeconds: &zero,
			Containers:                    []v1.Container{{Name: "sleep", Image: node.SleepImageRef, VolumeMounts: mounts}},
			Volumes:                       vols,
		},
	}
	return pod, cm, sec
}

// round runs one burst of k.pods pods of mix m and their teardown, for
// the agent and the kubelet at once, or for one of them alone (who).
func (k *sideBySide) round(round int, m kubeletMix, who burstOf) kubeletRound {
	r := k.r
	agent, kubelet := who != kubeletAlone, k.n != nil && who != agentAlone
	nodeName := benchNode
	if who == agentAlone {
		nodeName = k.agentNode
	}
	k.next++
	rr := kubeletRound{Round: round + 1, Mix: m.Name, Pods: k.pods, LoadBefore: loadAverage(), WithoutKubelet: k.n == nil, AgentIdentity: k.identity}
	r.Logf("bench: round %d, %s (load %s)", round+1, m.Name, rr.LoadBefore)
	pods := make([]*v1.Pod, k.pods)
	forEach(k.pods, func(i int) {
		name := fmt.Sprintf("k%d-%d", k.next, i)
		pod, cm, sec := k.kubeletPod(m, name, nodeName)
		if m.hostPath {
			if err := os.MkdirAll(filepath.Join(k.hostDir, name), 0o755); err != nil {
				r.Fatalf("hostPath: %v", err)
			}
		}
		k.c.putConfigMap(cm)
		k.c.putSecret(sec)
		pods[i] = pod
	})
	time.Sleep(500 * time.Millisecond) // let both see the objects settle

	// Set-up.
	stopProfile := func() {}
	if k.profile != "" && agent {
		// 3 s: the burst's set-ups, not the containers' start after them.
		stopProfile = k.a.profile(3*time.Second, filepath.Join(k.profile, fmt.Sprintf("kubelet-round%d-%s.pprof", round+1, m.short())))
	}
	var logStart int64
	if kubelet {
		logStart = fileSize(k.kubeletLog)
	}
	cpu0, busy0 := k.snapshot(), machineBusy()
	t0 := make([]time.Time, k.pods)
	uids := make([]string, k.pods)
	if agent {
		rr.agentLat = make([]time.Duration, k.pods)
	}
	var waits sync.WaitGroup
	var mu sync.Mutex
	created := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(created)
		forEach(k.pods, func(i int) {
			began := time.Now()
			k.c.putPod(pods[i])
			uid := k.c.uid(pods[i])
			mu.Lock()
			t0[i], uids[i] = began, uid
			mu.Unlock()
			if !agent {
				return
			}
			waits.Add(1)
			go func() {
				defer waits.Done()
				done, err := k.a.waitReady(context.Background(), uid, readyTimeout)
				if err != nil {
					r.Errorf("agent: pod %s not ready: %v", pods[i].Name, err)
				}
				rr.agentLat[i] = done.Sub(began)
			}()
		})
	}()
	<-created
	var setUps map[string]time.Time
	if kubelet {
		setUps = k.waitKubeletSetUps(logStart, uids, m.volumes())
	}
	waits.Wait()
	rr.SetupWindowS = time.Since(start).Seconds()
	rr.SetupCPU = cpuDelta(cpu0, k.snapshot())
	rr.SetupCPU.others(machineBusy() - busy0)
	rr.AgentShare = ratio(rr.SetupCPU["agent"], rr.SetupCPU.total()-rr.SetupCPU["others"])
	stopProfile()
	if r.Failed() {
		r.Fatalf("pods were not ready; agent log:\n%s", k.a.logTail())
	}
	if kubelet {
		rr.kubeletLat = make([]time.Duration, k.pods)
		for i, uid := range uids {
			rr.kubeletLat[i] = setUps[uid].Sub(t0[i])
		}
		k.waitRunning(pods)
		rr.RunningS = time.Since(start).Seconds()
	}

	// Teardown.
	cpu0, busy0 = k.snapshot(), machineBusy()
	if agent {
		rr.agentDown = make([]time.Duration, k.pods)
	}
	if kubelet {
		rr.kubeletDown = make([]time.Duration, k.pods)
	}
	deleted := make(chan struct{})
	start = time.Now()
	for i := range t0 {
		t0[i] = time.Time{}
	}
	go func() {
		defer close(deleted)
		forEach(k.pods, func(i int) {
			began := time.Now()
			mu.Lock()
			t0[i] = began
			mu.Unlock()
			k.c.deletePod(pods[i])
		})
	}()
	type target struct {
		pod  int
		path string
		lat  []time.Duration
	}
	var pending []target
	for i, uid := range uids {
		var both []target
		if agent {
			both = append(both, target{i, filepath.Join(k.a.root, "pods", uid), rr.agentDown})
		}
		if kubelet {
			both = append(both, target{i, k.n.Path("/var/lib/kubelet/pods/" + uid), rr.kubeletDown})
		}
		// Alternate which is looked at first, from round to round.
		if (round+k.next)%2 == 1 {
			slices.Reverse(both)
		}
		pending = append(pending, both...)
	}
	deadline := time.Now().Add(readyTimeout)
	for len(pending) > 0 {
		if time.Now().After(deadline) {
			r.Fatalf("%d pod directories (agent's and kubelet's) still there %v after the deletes, e.g. %s", len(pending), readyTimeout, pending[0].path)
		}
		kept := pending[:0]
		for _, p := range pending {
			mu.Lock()
			began := t0[p.pod]
			mu.Unlock()
			if !began.IsZero() {
				if _, err := os.Lstat(p.path); os.IsNotExist(err) {
					p.lat[p.pod] = time.Since(began)
					continue
				}
			}
			kept = append(kept, p)
		}
		pending = kept
		time.Sleep(3 * time.Millisecond)
	}
	<-deleted
	rr.TeardownWindow = time.Since(start).Seconds()
	rr.TeardownCPU = cpuDelta(cpu0, k.snapshot())
	rr.TeardownCPU.others(machineBusy() - busy0)
	if left := mountIDs(r, k.a.root); len(left) > 0 {
		r.Errorf("%d mounts left under the agent's %s after every pod was removed", len(left), k.a.root)
	}

	rr.Agent, rr.Kubelet = summarize(rr.agentLat), summarize(rr.kubeletLat)
	rr.AgentDown, rr.KubeletDown = summarize(rr.agentDown), summarize(rr.kubeletDown)
	rr.RatioP50, rr.RatioP99 = ratio(rr.Kubelet.P50, rr.Agent.P50), ratio(rr.Kubelet.P99, rr.Agent.P99)
	rr.DownRatioP50 = ratio(rr.KubeletDown.P50, rr.AgentDown.P50)
	r.Logf("bench: set-up agent %.1f/%.1f ms, kubelet %.1f/%.1f ms (p50/p99); teardown agent %.1f, kubelet %.1f ms (p50)",
		rr.Agent.P50, rr.Agent.P99, rr.Kubelet.P50, rr.Kubelet.P99, rr.AgentDown.P50, rr.KubeletDown.P50)
	return rr
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// setUpLine matches the kubelet's --v=1 line for a volume set up:
//
//	I1126 15:42:15.123456   1234 operation_generator.go:N] "MountVolume.SetUp succeeded for volume \"config\" (UniqueName: \"kubernetes.io/configmap/<uid>-config\") pod \"p\" (UID: \"<uid>\") " pod="ns/p"
var setUpLine = regexp.MustCompile(`^I(\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) .*MountVolume\.SetUp succeeded for volume .*UniqueName: \\"([^"\\]+)\\".*\(UID: \\"([0-9a-f-]+)\\"\)`)

// waitKubeletSetUps reads the kubelet's log from offset until every pod
// of uids has want distinct volumes set up, and returns, by pod, the
// latest of their set-up timestamps.
func (k *sideBySide) waitKubeletSetUps(offset int64, uids []string, want int) map[string]time.Time {
	f, err := os.Open(k.kubeletLog)
	if err != nil {
		k.r.Fatalf("kubelet log: %v", err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		k.r.Fatalf("kubelet log: %v", err)
	}
	wanted := map[string]bool{}
	for _, u := range uids {
		wanted[u] = true
	}
	volumes := map[string]map[string]bool{}
	latest := map[string]time.Time{}
	complete := 0
	rd := bufio.NewReader(f)
	var partial string
	deadline := time.Now().Add(readyTimeout)
	now := time.Now()
	for complete < len(uids) {
		line, err := rd.ReadString('\n')
		if err != nil { // at the end: wait for more
			partial += line
			if time.Now().After(deadline) {
				k.r.Fatalf("kubelet: %d of %d pods did not log all %d volumes set up within %v", len(uids)-complete, len(uids), want, readyTimeout)
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		line, partial = partial+line, ""
		mt := setUpLine.FindStringSubmatch(line)
		if mt == nil || !wanted[mt[3]] {
			continue
		}
		at, err := time.ParseInLocation("0102 15:04:05.000000", mt[1], time.Local)
		if err != nil {
			k.r.Fatalf("kubelet log time %q: %v", mt[1], err)
		}
		at = at.AddDate(now.Year(), 0, 0)
		uid := mt[3]
		if volumes[uid] == nil {
			volumes[uid] = map[string]bool{}
		}
		if volumes[uid][mt[2]] {
			continue
		}
		volumes[uid][mt[2]] = true
		if at.After(latest[uid]) {
			latest[uid] = at
		}
		if len(volumes[uid]) == want {
			complete++
		}
	}
	return latest
}

// waitRunning waits until every pod is Running: the kubelet has started
// its containers (not timed per pod).
func (k *sideBySide) waitRunning(pods []*v1.Pod) {
	names := map[string]bool{}
	for _, p := range pods {
		names[p.Name] = true
	}
	deadline := time.Now().Add(readyTimeout)
	for {
		list, err := k.client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{})
		running := 0
		if err == nil {
			for _, p := range list.Items {
				if names[p.Name] && p.Status.Phase == v1.PodRunning {
					running++
				}
			}
		}
		if running == len(pods) {
			return
		}
		if time.Now().After(deadline) {
			k.r.Fatalf("only %d of %d pods Running after %v (%v)", running, len(pods), readyTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// procKey names a process across PID reuse.
type procKey struct {
	pid   int
	start uint64
}

// procCPU is one process's CPU so far and the component it belongs to.
type procCPU struct {
	component string
	cpu       time.Duration // its own user + system, and that of the children it waited for
}

// snapshot reads the CPU of every process this program started, directly
// or not, by component: each process belongs to its nearest ancestor (or
// itself) that is a component. Processes the node's init reaps (shims of
// removed pods) count as shims.
func (k *sideBySide) snapshot() map[procKey]procCPU {
	procs := readProcs()
	self := os.Getpid()
	out := map[procKey]procCPU{}
	for _, p := range k.pinned {
		if _, ok := procs[p.pid]; !ok {
			if info, ok := readProc(p.pid); ok && info.start == p.start {
				k.r.Logf("bench: the listing of /proc lacked %s (%d); read it directly", info.comm, p.pid)
				out[p.procKey] = procCPU{p.component, info.cpu}
			}
		}
	}
	for pid, p := range procs {
		component, ours := "", false
		for q := pid; q > 0; q = procs[q].ppid {
			c, ok := procs[q]
			if !ok {
				break
			}
			if component == "" {
				switch {
				case q == k.a.pid():
					component = "agent"
				case c.comm == "kubelet":
					component = "kubelet"
				case c.comm == "containerd":
					component = "containerd"
				case strings.HasPrefix(c.comm, "containerd-shim"), q == k.nodeInit:
					component = "shims+runc+containers"
				case c.comm == "kube-apiserver":
					component = "kube-apiserver"
				case c.comm == "etcd":
					component = "etcd"
				case q == self:
					component = "bench"
				}
			}
			if q == self {
				ours = true // only what this program started counts
				break
			}
		}
		if component != "" && ours {
			out[procKey{pid, p.start}] = procCPU{component, p.cpu}
		}
	}
	if k.pinned == nil {
		// The long-lived components, found once: a snapshot whose listing
		// of /proc misses one reads it directly (one run's listing, under
		// load, once lacked both kube-apiserver and etcd).
		for key, c := range out {
			if info := procs[key.pid]; key.pid == self || key.pid == k.a.pid() || key.pid == k.nodeInit ||
				slices.Contains([]string{"kube-apiserver", "etcd", "kubelet", "containerd"}, info.comm) {
				k.pinned = append(k.pinned, pinnedProc{key, c.component})
			}
		}
	}
	return out
}

// pinnedProc is a long-lived process of a component.
type pinnedProc struct {
	procKey
	component string
}

// cpuDelta is the CPU each component used between two snapshots: what
// its processes show at the end less what they showed at the start. A
// process that ended in between is counted through the one that waited
// for it (its cutime and cstime: the node's init for a shim), which is of
// the same component, and its time before the start is taken off with it.
func cpuDelta(before, after map[procKey]procCPU) cpuUse {
	use := cpuUse{}
	for _, a := range after {
		use[a.component] += a.cpu.Seconds()
	}
	for _, b := range before {
		use[b.component] -= b.cpu.Seconds()
	}
	return use
}

type procInfo struct {
	ppid  int
	comm  string
	start uint64
	cpu   time.Duration
}

// readProcs reads /proc/<pid>/stat of every process.
func readProcs() map[int]procInfo {
	entries, _ := os.ReadDir("/proc")
	procs := map[int]procInfo{}
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || fmt.Sprint(pid) != e.Name() {
			continue
		}
		if p, ok := readProc(pid); ok {
			procs[pid] = p
		}
	}
	return procs
}

// readProc reads /proc/<pid>/stat.
func readProc(pid int) (procInfo, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procInfo{}, false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procInfo{}, false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 20 {
		return procInfo{}, false
	}
	var ppid int
	var utime, stime, cutime, cstime int64
	var start uint64
	fmt.Sscan(f[1], &ppid)
	fmt.Sscan(f[11], &utime)
	fmt.Sscan(f[12], &stime)
	fmt.Sscan(f[13], &cutime)
	fmt.Sscan(f[14], &cstime)
	fmt.Sscan(f[19], &start)
	return procInfo{ppid: ppid, comm: s[open+1 : end], start: start,
		cpu: time.Duration(utime+stime+cutime+cstime) * time.Second / clockTicks}, true
}

// kubeletTable writes the side-by-side figures, one table per mix, with
// every round and all rounds pooled.
func (r *report) kubeletTable(w io.Writer) {
	if len(r.Kubelet) == 0 {
		return
	}
	for _, m := range kubeletMixes {
		var rounds []kubeletRound
		for _, rr := range r.Kubelet {
			if rr.Mix == m.Name {
				rounds = append(rounds, rr)
			}
		}
		if len(rounds) == 0 {
			continue
		}
		switch {
		case rounds[0].Alternate:
			fmt.Fprintf(w, "\nalternately (-alternate): the kubelet's burst, then the agent's (the agent's first in rounds 2, 4, …), the other idle; agent with the %s identity on its own node: %d pods at once, each with %s\n", rounds[0].AgentIdentity, rounds[0].Pods, m.Name)
		case rounds[0].WithoutKubelet:
			fmt.Fprintf(w, "\nthe agent alone (-without-kubelet, no node), %s identity: %d pods at once, each with %s\n", rounds[0].AgentIdentity, rounds[0].Pods, m.Name)
		default:
			fmt.Fprintf(w, "\nside by side with the kubelet, agent with the %s identity: %d pods at once, each with %s\n", rounds[0].AgentIdentity, rounds[0].Pods, m.Name)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "round\tload before\tagent p50/p99\tkubelet p50/p99\tkubelet/agent p50, p99\twindow\tCPU s: agent, kubelet, containerd, shims+runc+containers, apiserver, etcd, bench, others\tall Running")
		var al, kl, ad, kd []time.Duration
		for _, rr := range rounds {
			window, cpu := fmt.Sprintf("%.2f s", rr.SetupWindowS), rr.SetupCPU.String()
			if rr.Alternate {
				window = fmt.Sprintf("kubelet's %.2f s, agent's %.2f s", rr.SetupWindowS, rr.AgentSetupWindowS)
				cpu = fmt.Sprintf("kubelet's burst %s; agent's burst %s", rr.SetupCPU, rr.AgentSetupCPU)
			}
			fmt.Fprintf(tw, "%d\t%s\t%.1f / %.1f ms\t%.1f / %.1f ms\t%.1f×, %.1f×\t%s\t%s\t%.1f s\n", rr.Round, rr.LoadBefore,
				rr.Agent.P50, rr.Agent.P99, rr.Kubelet.P50, rr.Kubelet.P99, rr.RatioP50, rr.RatioP99, window, cpu, rr.RunningS)
			al, kl = append(al, rr.agentLat...), append(kl, rr.kubeletLat...)
			ad, kd = append(ad, rr.agentDown...), append(kd, rr.kubeletDown...)
		}
		a, k := summarize(al), summarize(kl)
		fmt.Fprintf(tw, "all\t\t%.1f / %.1f ms\t%.1f / %.1f ms\t%.1f×, %.1f×\t\t\t\n", a.P50, a.P99, k.P50, k.P99, ratio(k.P50, a.P50), ratio(k.P99, a.P99))
		fmt.Fprintln(tw, "teardown\t\tagent p50/p99\tkubelet p50/p99\tkubelet/agent p50, p99\twindow\tCPU s: agent, kubelet, containerd, shims+runc+containers, apiserver, etcd, bench, others\t")
		for _, rr := range rounds {
			window, cpu := fmt.Sprintf("%.2f s", rr.TeardownWindow), rr.TeardownCPU.String()
			if rr.Alternate {
				window = fmt.Sprintf("kubelet's %.2f s, agent's %.2f s", rr.TeardownWindow, rr.AgentTeardownWindow)
				cpu = fmt.Sprintf("kubelet's burst %s; agent's burst %s", rr.TeardownCPU, rr.AgentTeardownCPU)
			}
			fmt.Fprintf(tw, "%d\t\t%.1f / %.1f ms\t%.1f / %.1f ms\t%.1f×, %.1f×\t%s\t%s\t\n", rr.Round,
				rr.AgentDown.P50, rr.AgentDown.P99, rr.KubeletDown.P50, rr.KubeletDown.P99, rr.DownRatioP50, ratio(rr.KubeletDown.P99, rr.AgentDown.P99), window, cpu)
		}
		a, k = summarize(ad), summarize(kd)
		fmt.Fprintf(tw, "all\t\t%.1f / %.1f ms\t%.1f / %.1f ms\t%.1f×, %.1f×\t\t\t\n", a.P50, a.P99, k.P50, k.P99, ratio(k.P50, a.P50), ratio(k.P99, a.P99))
		_ = tw.Flush()
	}
}

// others sets "others": busy, the whole machine's busy time in the same
// window, less what the components used.
func (c cpuUse) others(busy time.Duration) {
	c["others"] = busy.Seconds() - c.total()
}

// machineBusy is the time every CPU of the machine spent not idle, from
// the first line of /proc/stat.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks
}

func (c cpuUse) total() float64 {
	var t float64
	for _, v := range c {
		t += v
	}
	return t
}

func (c cpuUse) String() string {
	var parts []string
	for _, name := range cpuComponents {
		parts = append(parts, fmt.Sprintf("%.2f", c[name]))
	}
	return strings.Join(parts, ", ") + fmt.Sprintf(" (machine %.2f)", c.total())
}
