package main

import (
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
)

// sizes are how big each scenario is.
type sizes struct {
	name           string
	single         int           // pods created one at a time
	bursts         []int         // pods created at once
	manyConfigMaps int           // configMap volumes of one pod
	updates        int           // configMap updates of one volume
	sharedUpdates  int           // updates of the ConfigMap every pod uses
	restartPods    int           // pods (4 volumes each) across a restart
	binds          int           // unrelated bind mounts for the mount-table figure
	idle           time.Duration // window of the idle CPU figure
	residentPods   int           // pods whose emptyDir is full of files in the usage scenario
	residentFiles  int           // files in each of their emptyDirs
	usageBursts    int           // bursts of bursts[0] pods in the usage scenario
}

var (
	fullSize = sizes{name: "full", single: 50, bursts: []int{110, 1000}, manyConfigMaps: 100, updates: 20,
		sharedUpdates: 5, restartPods: 275, binds: 10000, idle: 10 * time.Second,
		residentPods: 50, residentFiles: 2000, usageBursts: 10}
	tinySize = sizes{name: "tiny", single: 3, bursts: []int{4}, manyConfigMaps: 5, updates: 2,
		sharedUpdates: 2, restartPods: 3, binds: 20, idle: 300 * time.Millisecond,
		residentPods: 2, residentFiles: 10, usageBursts: 2}
)

// scenario runs the figures of one mode against one agent.
type scenario struct {
	r       *runner
	rep     *report
	mode    string
	size    sizes
	a       *agent
	c       cluster
	profile string // directory for CPU profiles, or ""
	// rootParent is where the agent's root directory was made ("" for
	// the temporary directory): the floor works on the same file system.
	rootParent string
	next       int // numbers runs, so that every pod and object is new
	// cpuPerPod is the agent's CPU per pod (ms) of each burst by step
	// ("set up", "torn down") and size, for the comparison with the floor.
	cpuPerPod map[string][]float64
	// trace, when set, is the path (the JSON file's, without .json) the
	// system-call table and raw traces of a last, traced burst start with
	// (-syscalls).
	trace string
}

func (s *scenario) run(prefix string) string {
	s.next++
	return fmt.Sprintf("%s%d", prefix, s.next)
}

// objects writes the ConfigMap and Secret of each pod (not timed).
func (s *scenario) objects(n int) []*v1.Pod {
	run := s.run("p")
	pods := make([]*v1.Pod, n)
	forEach(n, func(i int) {
		pod, cm, sec := podObjects(run, i)
		s.c.putConfigMap(cm)
		s.c.putSecret(sec)
		pods[i] = pod
	})
	return pods
}

// single creates pods one at a time, each ready before the next.
func (s *scenario) single() {
	ready, removed := s.oneAtATime(s.objects(s.size.single))
	s.rep.distribution(s.mode, "pod → all 4 volumes ready, one at a time", ready, 0, "p50 ≤ 20 ms")
	s.rep.distribution(s.mode, "pod removed → torn down, one at a time", removed, 0, "")
}

// oneAtATime creates pods one after another, each once the one before is
// ready, then removes them one after another, each once the one before is
// torn down.
func (s *scenario) oneAtATime(pods []*v1.Pod) (ready, removed []time.Duration) {
	for _, p := range pods {
		l, _ := createAll(s.r, s.a, s.c, []*v1.Pod{p})
		ready = append(ready, l...)
	}
	for _, p := range pods {
		l, _ := deleteAll(s.r, s.a, s.c, []*v1.Pod{p})
		removed = append(removed, l...)
	}
	return ready, removed
}

// burst creates n pods at once, measures the agent at rest with them,
// updates ConfigMaps they use, and removes them all at once.
func (s *scenario) burst(n int, idle, updates bool) {
	pods := s.objects(n)
	s.waitQuiet(fmt.Sprintf("the %d objects of the burst were written", 2*n))
	var reqs map[string]float64 // read only for the figures after the burst
	if idle {
		reqs = s.apiRequests()
	}
	stop := s.startProfile(fmt.Sprintf("burst-%d-create", n))
	u0 := s.usage()
	lat, total := createAll(s.r, s.a, s.c, pods)
	u1 := s.usage()
	stop()
	target := ""
	switch n {
	case 110:
		target = "p50 ≤ 20 ms, p99 ≤ 100 ms"
	case 1000:
		target = "all ≤ 1 s"
	}
	s.rep.distribution(s.mode, fmt.Sprintf("burst of %d pods → each ready", n), lat, total, target)
	s.agentCPU("set up", n, u0, u1)
	if idle {
		s.settle(n, reqs)
	}
	if updates {
		s.updateOne(s.c.uid(pods[0]), pods[0].Name)
		s.updateShared(pods)
	}
	stop = s.startProfile(fmt.Sprintf("burst-%d-delete", n))
	u0 = s.usage()
	del, total := deleteAll(s.r, s.a, s.c, pods)
	u1 = s.usage()
	stop()
	target = "p99 ≤ 100 ms"
	if n >= 1000 {
		target = "all ≤ 1 s"
	}
	s.rep.distribution(s.mode, fmt.Sprintf("%d pods removed at once → each torn down", n), del, total, target)
	s.agentCPU("torn down", n, u0, u1)
	if left := mountIDs(s.r, s.a.root); len(left) > 0 {
		s.r.Errorf("%d mounts left under %s after every pod was removed", len(left), s.a.root)
	}
}

// bursts measures the agent at rest with no pod, then rounds bursts of
// bursts[0] pods created at once, at rest with them, and removed at once:
// the figures of issue 21 (bursts, teardown, memory) without the rest of
// the suite, so that builds can be compared round by round.
func (s *scenario) bursts(rounds int) {
	s.idle(0)
	for range rounds {
		s.burst(s.size.bursts[0], true, false)
	}
	if s.trace != "" {
		s.tracedBurst(s.size.bursts[0])
	}
	if s.mode == "manifest" {
		s.floor(s.size.bursts[0])
	}
}

// idle measures CPU, wake-ups and RSS with n pods and nothing changing.
func (s *scenario) idle(n int) {
	time.Sleep(s.size.idle / 5) // let finished work settle
	s.addIdle(n, measureIdle(s.r, s.a.pid(), s.size.idle))
}

// addIdle reports the idle figures with n pods, and saves the heap
// profile, metrics and goroutines at that moment when profiling.
func (s *scenario) addIdle(n int, f idleFigures) {
	if s.profile != "" {
		s.a.save("/debug/pprof/heap", filepath.Join(s.profile, fmt.Sprintf("%s-idle-%d.heap.pprof", s.mode, n)))
		s.a.save("/metrics", filepath.Join(s.profile, fmt.Sprintf("%s-idle-%d.metrics", s.mode, n)))
		s.a.save("/debug/pprof/goroutine?debug=1", filepath.Join(s.profile, fmt.Sprintf("%s-idle-%d.goroutines.txt", s.mode, n)))
	}
	target := ""
	if n > 0 {
		target = fmt.Sprintf("RSS ≤ %.1f MiB", 30+float64(n)*64/1024)
	}
	s.rep.add(figure{Mode: s.mode, Name: fmt.Sprintf("idle with %d pods", n), Idle: &f, Target: target})
}

// updateOne updates one pod's ConfigMap and times until its configMap
// volume shows the new content.
func (s *scenario) updateOne(uid, name string) {
	file := filepath.Join(volumePath(s.r, s.a, uid, "config"), "config")
	var lat []time.Duration
	for i := range s.size.updates {
		value := fmt.Sprintf("update %d of %s\n", i, name)
		_, cm, _ := podObjects("", 0)
		cm.Name, cm.Data = name, map[string]string{"config": value}
		start := time.Now()
		s.c.putConfigMap(cm)
		lat = append(lat, waitContent(s.r, []string{file}, []byte(value), start)...)
	}
	s.rep.distribution(s.mode, "configMap update → new content in its volume", lat, 0, "")
}

// updateShared updates the ConfigMap every pod's projected volume uses and
// times until every pod shows it.
func (s *scenario) updateShared(pods []*v1.Pod) {
	files := make([]string, len(pods))
	for i, p := range pods {
		files[i] = filepath.Join(volumePath(s.r, s.a, s.c.uid(p), "bundle"), "shared")
	}
	var all []time.Duration
	for i := range s.size.sharedUpdates {
		value := fmt.Sprintf("shared update %d\n", i)
		start := time.Now()
		s.c.putConfigMap(sharedObject(value))
		lat := waitContent(s.r, files, []byte(value), start)
		all = append(all, summarizeMax(lat))
	}
	s.rep.distribution(s.mode, fmt.Sprintf("configMap used by %d pods updated → all %d show it", len(pods), len(pods)), all, 0, "")
}

func summarizeMax(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// manyConfigMaps creates one pod with many configMap volumes.
func (s *scenario) manyConfigMaps() {
	var lat []time.Duration
	var pods []*v1.Pod
	for range 5 {
		pod, cms := manyConfigMapsPod(s.run("m"), s.size.manyConfigMaps)
		for _, cm := range cms {
			s.c.putConfigMap(cm)
		}
		l, _ := createAll(s.r, s.a, s.c, []*v1.Pod{pod})
		lat = append(lat, l...)
		pods = append(pods, pod)
	}
	s.rep.distribution(s.mode, fmt.Sprintf("pod with %d configMap volumes → ready", s.size.manyConfigMaps), lat, 0, "")
	deleteAll(s.r, s.a, s.c, pods)
}

// restart stops the agent with sig while it serves pods with 4 volumes
// each, starts it again and times until /readyz answers 200 and every pod
// is ready; it counts the mounts made and removed meanwhile (target 0).
func (s *scenario) restart(pods []*v1.Pod, sig syscall.Signal) {
	before := mountIDs(s.r, s.a.root)
	s.a.stop(sig)
	started := s.a.start()
	s.a.waitFor(readyTimeout, "/readyz 200", func() bool { code, _ := s.a.get("/readyz"); return code == 200 })
	readyz := time.Since(started)
	var last time.Time
	forEach(len(pods), func(i int) {
		done, err := s.a.waitReady(s.r.ctx, s.c.uid(pods[i]), readyTimeout)
		if err != nil {
			s.r.Fatalf("after restart: %v", err)
		}
		if done.After(last) {
			last = done // only a rough maximum: workers race here
		}
	})
	allReady := time.Since(started)
	after := mountIDs(s.r, s.a.root)
	made, removed := 0, 0
	for id := range after {
		if _, ok := before[id]; !ok {
			made++
		}
	}
	for id := range before {
		if _, ok := after[id]; !ok {
			removed++
		}
	}
	vols := 4 * len(pods)
	name := fmt.Sprintf("restart (%v) with %d volumes", sig, vols)
	s.rep.value(s.mode, name+" → /readyz 200", ms(readyz), "ms", "")
	s.rep.value(s.mode, name+" → every pod ready", ms(allReady), "ms", "")
	s.rep.value(s.mode, name+": mounts made + removed", float64(made+removed), "calls", "0")
	setups := s.a.metric(`volume_agent_operations_total{operation="setup"`)
	// A volume found on disk is set up again without mounting: its content
	// is compared with the source and rewritten only if it differs.
	s.rep.value(s.mode, name+": set-up operations after start (no mount)", setups, "operations", "")
}

// startProfile records a CPU profile of the agent while a step runs, when
// asked to; the returned function waits for it.
func (s *scenario) startProfile(name string) func() {
	if s.profile == "" {
		return func() {}
	}
	return s.a.profile(20*time.Second, filepath.Join(s.profile, s.mode+"-"+name+".pprof"))
}
