// Command bench measures a built volume-agent against the targets of
// BENCHMARKS.md, as root:
//
//	go run ./bench                      # full size, both modes, about 10 minutes
//	go run ./bench -size tiny           # a smoke run (the test suite does this)
//	go run ./bench -profile-dir /tmp/p  # and CPU profiles of the bursts
//	go run ./bench -scenario usage -agent-args --volume-stats-period=1s
//	                                    # set-up bursts while usage walks run
//	go run ./bench -scenario kubelet -rounds 5
//	                                    # side by side with a real kubelet (test/node)
//
// It starts the agent as a separate process and measures it only through
// its public surfaces: manifest files or the API server, the files of the
// volumes, the mount table, /v1/pods?wait=, /readyz, /metrics, and /proc
// for CPU and memory. Cluster mode runs the real etcd and kube-apiserver of
// test/controlplane on loopback. It writes a table to stdout and the same
// figures, with the machine, the date and the commit, to a JSON file. No
// figure fails the run: only an error (a pod never ready, a mount left
// behind) does.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/volume-agent/volume-agent/test/controlplane"
)

type options struct {
	size           sizes
	modes          []string
	out            string
	profileDir     string
	agent          string // a built agent; built from this module when empty
	logDir         string // where agent logs go (kept), or "" for a temporary directory
	logLevel       string
	rootParent     string       // where agents' root directories are made
	agentArgs      []string     // more flags for every agent (-agent-args)
	scenario       string       // "suite" (every figure), "usage", "bursts", "kubelet" or "kubelet-edit"
	rounds         int          // bursts of the bursts scenario, or of each mix in the kubelet scenario
	pods           int          // pods of each burst in the kubelet scenario
	withoutKubelet bool         // the kubelet scenario's control: no node, the agent alone
	agentIdentity  string       // the kubelet scenario's agent credentials: node or admin
	syscalls       bool         // -scenario bursts: one more burst, traced with strace
	alternate      bool         // -scenario kubelet: the kubelet's burst, then the agent's, not at once
	mixes          []kubeletMix // -scenario kubelet: the volume mixes to run, in order
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == childFlag {
		err := runChild(os.Args[2:])
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	rep, err := run(o, os.Stdout, func(f string, args ...any) { fmt.Fprintf(os.Stderr, f+"\n", args...) })
	if rep != nil {
		rep.table(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	size := fs.String("size", "full", "full, or tiny for a smoke run")
	modes := fs.String("modes", "manifest,cluster", "comma-separated: manifest, cluster")
	var o options
	fs.StringVar(&o.out, "out", "bench-results.json", "JSON file for the figures")
	fs.StringVar(&o.profileDir, "profile-dir", "", "when set, CPU profiles of the agent during each burst go here (adds 20 s a step)")
	fs.StringVar(&o.logDir, "log-dir", "", "keep the agents' logs in this directory")
	fs.StringVar(&o.logLevel, "log-level", "warn", "the agents' --log-level (debug shows each step with its time)")
	fs.StringVar(&o.rootParent, "root-parent", "", "directory in which each agent's --root-dir is made (default: the temporary directory); its file system's metadata costs are part of every figure")
	fs.StringVar(&o.agent, "agent", "", "volume-agent binary to measure (default: build ./cmd/volume-agent)")
	fs.StringVar(&o.scenario, "scenario", "suite", "suite (every figure), usage (bursts of set-ups beside emptyDirs full of files; compare -agent-args --volume-stats-period=1s with =0), bursts (idle memory, then -rounds bursts of 110 pods created and removed at once, with the memory at rest between), kubelet (bursts side by side with a real kubelet of test/node, same node and control plane), or kubelet-edit (the ConfigMaps of -pods running pods updated at once, side by side with the kubelet: until each shows the new content)")
	fs.IntVar(&o.rounds, "rounds", 0, "bursts of 110 pods in -scenario bursts (default 3), of each volume mix in -scenario kubelet (default 5), of updates in -scenario kubelet-edit (default 3)")
	fs.IntVar(&o.pods, "pods", 50, "pods created at once in each burst of -scenario kubelet")
	fs.StringVar(&o.agentIdentity, "agent-identity", "node", "-scenario kubelet: the agent's credentials, node (the node's, system:node:<name>, as the DaemonSet gives it) or admin (as the suite's cluster mode)")
	fs.BoolVar(&o.withoutKubelet, "without-kubelet", false, "-scenario kubelet with no node: the same bursts, the agent alone (a control)")
	fs.BoolVar(&o.alternate, "alternate", false, "-scenario kubelet: each round of each mix is two bursts, the kubelet's (its node's pods) then the agent's (pods of a node of its own, bench-agent, which no kubelet serves), each while the other is idle, in the other order on even rounds; without it both set up the same pods at once")
	fs.BoolVar(&o.syscalls, "syscalls", false, "-scenario bursts: after the rounds, one more burst with strace attached to every thread of the agent, for its set-ups and again for its teardowns: system calls per pod by call, failing ones by error and by path; the table goes beside -out (NAME.syscalls.txt, raw traces NAME.MODE-STEP.strace). ptrace slows every call: that burst's latency and CPU mean nothing")
	mixes := fs.String("mixes", "", "-scenario kubelet: comma-separated mixes to run, of "+strings.Join(mixNames(), ", ")+" (default: all)")
	agentArgs := fs.String("agent-args", "", "more flags for every agent, space-separated (e.g. --volume-stats-period=1s)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.agentArgs = strings.Fields(*agentArgs)
	switch o.scenario {
	case "suite", "usage":
	case "bursts":
		o.rounds = cmp.Or(o.rounds, 3)
	case "kubelet":
		o.rounds = cmp.Or(o.rounds, 5)
	case "kubelet-edit":
		o.rounds = cmp.Or(o.rounds, 3)
		if o.withoutKubelet {
			return o, errors.New("-scenario kubelet-edit compares with the kubelet: drop -without-kubelet")
		}
	default:
		return o, fmt.Errorf("-scenario %q: want suite, usage, bursts, kubelet or kubelet-edit", o.scenario)
	}
	if o.alternate && (o.scenario != "kubelet" || o.withoutKubelet) {
		return o, errors.New("-alternate alternates the kubelet's bursts and the agent's: it needs -scenario kubelet, without -without-kubelet")
	}
	if o.syscalls && o.scenario != "bursts" {
		return o, errors.New("-syscalls traces a burst of -scenario bursts: add -scenario bursts")
	}
	if o.syscalls {
		if _, err := exec.LookPath("strace"); err != nil {
			return o, errors.New("-syscalls needs strace (apt-get install strace; test/deps.sh installs it)")
		}
	}
	if o.agentIdentity != "node" && o.agentIdentity != "admin" {
		return o, fmt.Errorf("-agent-identity %q: want node or admin", o.agentIdentity)
	}
	ms, err := parseMixes(*mixes)
	if err != nil {
		return o, err
	}
	o.mixes = ms
	if *mixes != "" && o.scenario != "kubelet" {
		return o, errors.New("-mixes chooses the mixes of -scenario kubelet: add -scenario kubelet")
	}
	if o.rounds < 0 || o.pods < 1 {
		return o, errors.New("-rounds and -pods must be at least 1")
	}
	switch *size {
	case "full":
		o.size = fullSize
	case "tiny":
		o.size = tinySize
	default:
		return o, fmt.Errorf("-size %q: want full or tiny", *size)
	}
	for _, m := range strings.Split(*modes, ",") {
		if m != "manifest" && m != "cluster" {
			return o, fmt.Errorf("-modes: unknown mode %q", m)
		}
		o.modes = append(o.modes, m)
	}
	if o.scenario == "kubelet" || o.scenario == "kubelet-edit" {
		o.modes = []string{"cluster"} // the kubelet reads its pods from the API server
	}
	return o, nil
}

// run measures every mode and returns the report, with an error when a
// mode could not finish.
func run(o options, out io.Writer, logf func(string, ...any)) (*report, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the benchmarks need root: the agent mounts tmpfs")
	}
	module, err := moduleDir()
	if err != nil {
		return nil, err
	}
	rep := &report{Machine: describeMachine(), Date: time.Now().UTC(), Commit: commit(module), Agent: o.agent, RootFS: fileSystem(o.rootParent), Size: o.size.name}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	bin, cleanup, err := agentBinary(o.agent, module)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	for _, dir := range []string{o.profileDir, o.logDir} {
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	for _, mode := range o.modes {
		logf("bench: %s mode", mode)
		if err := runMode(o, rep, mode, agentConfig{binary: bin, self: self, node: benchNode, rootParent: o.rootParent, logDir: o.logDir, logLevel: o.logLevel, args: o.agentArgs, profiling: o.profileDir != ""}, logf); err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s mode: %v", mode, err))
		}
	}
	if err := rep.writeJSON(o.out); err != nil {
		return rep, err
	}
	fmt.Fprintf(out, "figures written to %s\n", o.out)
	if len(rep.Errors) > 0 {
		return rep, errors.New(strings.Join(rep.Errors, "; "))
	}
	return rep, nil
}

// runMode runs one mode's scenarios with its own runner, so that a failure
// ends only that mode and its cleanups always run.
func runMode(o options, rep *report, mode string, cfg agentConfig, logf func(string, ...any)) (err error) {
	r := newRunner(logf)
	defer r.close()
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(fatal)
			if !ok {
				panic(p)
			}
			err = errors.New(f.msg)
		}
		if err == nil && r.Failed() {
			err = errors.New("see the errors logged above")
		}
	}()
	switch {
	case o.scenario == "kubelet":
		kubeletScenario(r, o, rep, cfg)
	case o.scenario == "kubelet-edit":
		kubeletEditScenario(r, o, rep, cfg)
	case mode == "manifest":
		manifestMode(r, o, rep, cfg)
	default:
		clusterMode(r, o, rep, cfg)
	}
	return nil
}

func manifestMode(r *runner, o options, rep *report, cfg agentConfig) {
	cfg.manifests = privateManifestDir(r)
	c := manifestDir{r: r, dir: cfg.manifests}
	c.putConfigMap(sharedObject("initial\n"))
	s := &scenario{r: r, rep: rep, mode: "manifest", size: o.size, c: c, profile: o.profileDir, rootParent: o.rootParent, trace: o.tracePrefix()}
	s.a = newAgent(r, cfg)
	s.a.start()
	s.a.waitSynced()
	switch o.scenario {
	case "usage":
		s.usageLoad()
		return
	case "bursts":
		s.bursts(o.rounds)
		return
	}
	s.all(true)
	s.floor(s.size.bursts[0])
	s.mountTable(cfg)
}

// tracePrefix is where the system-call table and traces of -syscalls go:
// beside the JSON file, named after it; "" without -syscalls.
func (o options) tracePrefix() string {
	if !o.syscalls {
		return ""
	}
	return strings.TrimSuffix(o.out, ".json")
}

// privateManifestDir makes the manifest directory one level below a
// temporary directory of its own. The agent also watches the directory's
// parent (to follow a replaced directory); were that parent the shared
// temporary directory, every file another program makes or removes there
// would wake the agent and count as its own wake-ups and CPU.
func privateManifestDir(r *runner) string {
	dir := filepath.Join(r.TempDir(), "manifests")
	if err := os.Mkdir(dir, 0o755); err != nil {
		r.Fatalf("manifest directory: %v", err)
	}
	return dir
}

func clusterMode(r *runner, o options, rep *report, cfg agentConfig) {
	cp := controlplane.Start(r, controlplane.Options{Logf: r.Logf})
	cp.CreateNamespace(r, namespace)
	config := cp.AdminConfig()
	config.QPS, config.Burst = 1000, 2000 // the benchmark's own client must not be the bottleneck
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		r.Fatalf("client: %v", err)
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: benchNode}}
	if _, err := client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		r.Fatalf("node: %v", err)
	}
	c := &apiServer{r: r, client: client, uids: map[string]string{}}
	c.putConfigMap(sharedObject("initial\n"))
	cfg.kubeconfig = cp.AdminKubeconfig()
	s := &scenario{r: r, rep: rep, mode: "cluster", size: o.size, c: c, profile: o.profileDir, trace: o.tracePrefix()}
	s.a = newAgent(r, cfg)
	s.a.start()
	s.a.waitSynced()
	switch o.scenario {
	case "usage":
		s.usageLoad()
		return
	case "bursts":
		s.bursts(o.rounds)
		return
	}
	s.all(false)
}

// all runs the scenarios against a started agent; idle figures in
// manifest mode only, where nothing else runs.
func (s *scenario) all(idle bool) {
	if idle {
		s.idle(0)
	}
	s.single()
	for i, n := range s.size.bursts {
		s.burst(n, idle, i == 0)
	}
	s.manyConfigMaps()
	pods := s.objects(s.size.restartPods)
	createAll(s.r, s.a, s.c, pods)
	// A manifest changed less than 0.75 s before a start waits that long
	// (it may be half-written); a real restart comes long after the writes.
	time.Sleep(time.Second)
	s.restart(pods, syscall.SIGTERM)
	s.restart(pods, syscall.SIGKILL)
	deleteAll(s.r, s.a, s.c, pods)
}

// mountTable measures single pods again with an agent in a mount namespace
// holding many unrelated bind mounts (target: within 2× of the figure
// without them).
func (s *scenario) mountTable(cfg agentConfig) {
	s.a.stop(syscall.SIGTERM)
	cfg.binds = s.size.binds
	s.a = newAgent(s.r, cfg)
	s.a.start()
	s.a.waitSynced()
	// The pods' directories are in the agent's namespace's view too: the
	// root is on the host's disk, only the mounts are private.
	ready, removed := s.oneAtATime(s.objects(s.size.single))
	s.rep.distribution(s.mode, fmt.Sprintf("pod → all 4 volumes ready, one at a time, %d unrelated bind mounts", s.size.binds), ready, 0, "within 2× of the figure without them")
	s.rep.distribution(s.mode, fmt.Sprintf("pod removed → torn down, one at a time, %d unrelated bind mounts", s.size.binds), removed, 0, "")
}

// moduleDir is the root of this module, where ./cmd/volume-agent is.
func moduleDir() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run the benchmarks from the volume-agent module")
	}
	return filepath.Dir(mod), nil
}

// agentBinary returns the agent to measure, building it once when none is
// given.
func agentBinary(given, module string) (string, func(), error) {
	if given != "" {
		return given, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "volume-agent-bench-bin-")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "volume-agent")
	build := exec.Command("go", "build", "-o", bin, "./cmd/volume-agent")
	build.Dir = module
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build volume-agent: %w\n%s", err, out)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}
