package node

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/test/controlplane"
	"github.com/volume-agent/volume-agent/test/internal/proc"
)

// Options configure a node.
type Options struct {
	// Name is the node's name; default "node-e2e".
	Name string
	// Images are imported into containerd (namespace k8s.io) before the
	// kubelet starts, by reference. The sleep image (SleepImageRef, also
	// the sandbox image PauseImageRef) is always there.
	Images map[string]Image
	// Logf receives progress and, when the test failed, the tails of the
	// node's logs. Defaults to t.Logf.
	Logf func(format string, args ...any)
	// VolumeStatsAggPeriod is the kubelet's volumeStatsAggPeriod: how
	// often it measures the pods' volumes for its kubelet_volume_stats_*
	// metrics (a new pod's volumes are first measured within it). Zero:
	// the kubelet's default, one minute.
	VolumeStatsAggPeriod time.Duration
}

// Node is a running kubelet with its container runtime, in namespaces of
// its own.
type Node struct {
	t      testing.TB
	name   string
	dir    string // the node's files on the host: state, configs, logs
	root   string // unpacked Debian packages
	logf   func(string, ...any)
	holder *exec.Cmd
	stdin  io.Closer // closing it ends the namespaces' init
	exited chan struct{}
	init   int         // PID (in the host's PID namespace) of the namespaces' init
	procs  []*exec.Cmd // containerd and the kubelet, through nsenter
	cgroup string      // cgroupRoot of the kubelet, removed at the end
	port   int         // the kubelet's HTTPS API port, on 127.0.0.1
	stats  time.Duration
	loops  []string // backing files of MountBtrfs's loop devices
}

// Start fetches (or reuses) the runtime packages and the kubelet, starts a
// node registered with cp and waits until it is Ready. It needs root. The
// node is torn down when the test ends.
func Start(t testing.TB, cp *controlplane.ControlPlane, opts Options) *Node {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("node: a kubelet node needs root (namespaces, mounts, cgroups)")
	}
	for _, tool := range []string{"unshare", "nsenter", "ip", "ldd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("node: the test node needs %s (util-linux, iproute2, libc-bin; make test installs them): %v", tool, err)
		}
	}
	if opts.Name == "" {
		opts.Name = "node-e2e"
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	n := &Node{t: t, name: opts.Name, dir: t.TempDir(), logf: opts.Logf, exited: make(chan struct{}),
		stats: opts.VolumeStatsAggPeriod}
	n.root = runtimeRoot(t, opts.Logf)
	kubelet := controlplane.Kubelet(t)
	n.cgroup = fmt.Sprintf("/volume-agent-e2e-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	n.writeFiles(cp)
	t.Cleanup(n.stop)
	if err := n.createCgroupRoot(); err != nil {
		t.Fatalf("node: %v", err)
	}
	n.startNamespaces()

	n.startContainerd()
	sleep, err := buildSleepImage(buildSleeper(t, n.dir))
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	n.importImage(PauseImageRef, sleep)
	n.importImage(SleepImageRef, sleep)
	for ref, img := range opts.Images {
		n.importImage(ref, img)
	}
	n.startKubelet(kubelet, cp)
	n.waitReady(cp)
	return n
}

// CgroupRoot is the kubelet's cgroupRoot, under which every pod's cgroup
// is, in every hierarchy.
func (n *Node) CgroupRoot() string { return n.cgroup }

// Name is the node's name.
func (n *Node) Name() string { return n.name }

func (n *Node) path(name string) string { return filepath.Join(n.dir, name) }

// writeFiles lays out the node's directory: the state directories bound
// over /var/lib, /var/log and /run, the CNI configuration, the containerd
// and kubelet configurations and the kubelet's kubeconfig and certificate.
func (n *Node) writeFiles(cp *controlplane.ControlPlane) {
	t := n.t
	for _, d := range []string{"var-lib", "var-log", "run", "cni", "cni-bin"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			t.Fatalf("node: %v", err)
		}
	}
	ports := freePorts(t, 2)
	n.port = ports[0]
	kubelet := kubeletConfig(ports[0], ports[1], n.path("ca.crt"), n.cgroup)
	if n.stats > 0 {
		kubelet += fmt.Sprintf("volumeStatsAggPeriod: %s\n", n.stats)
	}
	files := map[string]string{
		"cni/10-loopback.conflist": cniConfig,
		"containerd.toml":          containerdConfig(n.root, n.path("cni-bin"), n.path("cni")),
		"kubelet.yaml":             kubelet,
		"ca.crt":                   string(cp.CACert()),
	}
	for name, content := range files {
		if err := os.WriteFile(n.path(name), []byte(content), 0o600); err != nil {
			t.Fatalf("node: %v", err)
		}
	}
	if err := os.WriteFile(n.path("cni-bin/pod-veth"), []byte(cniPlugin), 0o755); err != nil {
		t.Fatalf("node: %v", err)
	}
	if err := os.Symlink(filepath.Join(n.root, "usr/lib/cni/loopback"), n.path("cni-bin/loopback")); err != nil {
		t.Fatalf("node: %v", err)
	}
	// The kubelet's credentials as files, where GKE keeps them: the
	// kubeconfig names the client certificate by its path on the node.
	cp.NodeCredentialsAt(t, n.name, controlplane.CredentialFiles{
		Kubeconfig:     n.path("var-lib" + strings.TrimPrefix(KubeletKubeconfig, "/var/lib")),
		CertFile:       n.path("var-lib" + strings.TrimPrefix(KubeletCertFile, "/var/lib")),
		CertFileSeenAs: KubeletCertFile,
	})
}

// Where the node's kubelet keeps its kubeconfig and client certificate
// (its own identity, system:node:<name>), as the node sees them: GKE's
// layout (kubeadm's kubeconfig is /etc/kubernetes/kubelet.conf, which the
// node shares with this machine).
const (
	KubeletKubeconfig = "/var/lib/kubelet/kubeconfig"
	KubeletCertDir    = "/var/lib/kubelet/pki"
	KubeletCertFile   = KubeletCertDir + "/kubelet-client-current.pem"
)

// holderScript runs as init of the node's PID namespace, in its mount
// namespace: it binds the node's state directories ($1) over the host's,
// makes every mount shared (so that mounts made in containers with
// Bidirectional propagation reach the node, and the node's reach
// HostToContainer ones), reports, and waits until its stdin closes.
const holderScript = `set -e
mount --bind "$1/var-lib" /var/lib
mount --bind "$1/var-log" /var/log
mount --bind "$1/run" /run
mount --make-rshared /
echo ready
read -r _`

// startNamespaces starts the init of the node's mount and PID namespaces.
// unshare dies with the test process (Pdeathsig) and kills init when it
// dies (--kill-child); init's death kills every process of the PID
// namespace, containers included.
func (n *Node) startNamespaces() {
	t := n.t
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--pid", "--fork",
		"--kill-child=SIGKILL", "--mount-proc", "--", "sh", "-c", holderScript, "sh", n.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("node: start the namespaces: %v", err)
	}
	n.holder, n.stdin = cmd, stdin
	go func() { _ = cmd.Wait(); close(n.exited) }()
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("node: the namespaces' init did not set up the mounts (said %q)", line)
	}
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
	if err != nil {
		t.Fatalf("node: find the namespaces' init: %v", err)
	}
	if n.init, err = strconv.Atoi(strings.TrimSpace(string(children))); err != nil {
		t.Fatalf("node: find the namespaces' init in %q: %v", children, err)
	}
}

// Command returns a command that runs name inside the node's namespaces.
func (n *Node) Command(name string, args ...string) *exec.Cmd {
	all := append([]string{"--target", strconv.Itoa(n.init), "--mount", "--pid", "--", name}, args...)
	cmd := exec.Command("nsenter", all...)
	cmd.Env = append(os.Environ(), "PATH="+n.pathEnv())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// pathEnv puts the packages' programs (containerd-shim-runc-v2, runc) first.
func (n *Node) pathEnv() string {
	return filepath.Join(n.root, "usr/bin") + ":" + filepath.Join(n.root, "usr/sbin") + ":" + os.Getenv("PATH")
}

// Path returns where the test process finds path as the node sees it:
// /proc/PID/root/path, which resolves through the node's mounts.
func (n *Node) Path(path string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", n.init), path)
}

// Mounts returns the node's mount table.
func (n *Node) Mounts() ([]*mountinfo.Info, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", n.init))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return mountinfo.GetMountsFromReader(f, nil)
}

// daemon starts a long-running process of the node, logging into the
// node's directory.
func (n *Node) daemon(logName, name string, args ...string) {
	t := n.t
	log, err := os.Create(n.path(logName))
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	defer log.Close() // the child has its own copy
	cmd := n.Command(name, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("node: start %s: %v", name, err)
	}
	n.procs = append(n.procs, cmd)
	go func() { _ = cmd.Wait() }()
}

func (n *Node) startContainerd() {
	n.daemon("containerd.log", filepath.Join(n.root, "usr/bin/containerd"), "--config", n.path("containerd.toml"))
	n.waitFor(30*time.Second, "containerd answers", "containerd.log", func() error {
		_, err := n.ctr("version")
		return err
	})
}

// ctr runs containerd's client in the node, in the CRI's namespace.
func (n *Node) ctr(args ...string) (string, error) {
	all := append([]string{"--address", containerdSocket, "--namespace", "k8s.io"}, args...)
	out, err := n.Command(filepath.Join(n.root, "usr/bin/ctr"), all...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// importImage writes img as a tarball and imports it under ref.
func (n *Node) importImage(ref string, img Image) {
	t := n.t
	path, err := writeImage(n.dir, ref, img)
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	if _, err := n.ctr("images", "import", path); err != nil {
		t.Fatalf("node: import image %s: %v", ref, err)
	}
}

func (n *Node) startKubelet(kubelet string, cp *controlplane.ControlPlane) {
	n.daemon("kubelet.log", kubelet,
		"--config="+n.path("kubelet.yaml"),
		"--kubeconfig="+KubeletKubeconfig,
		"--hostname-override="+n.name,
		"--v=1")
}

// waitReady waits until the node is Ready and then takes off the
// not-ready taint that admission put on it, as the node lifecycle
// controller (which the test control plane does not run) would.
func (n *Node) waitReady(cp *controlplane.ControlPlane) {
	client := cp.Client()
	n.waitFor(2*time.Minute, "node "+n.name+" Ready", "kubelet.log", func() error {
		node, err := client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("not Ready: %v", node.Status.Conditions)
	})
	n.waitFor(30*time.Second, "node "+n.name+" untainted", "kubelet.log", func() error {
		node, err := client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var kept []corev1.Taint
		for _, taint := range node.Spec.Taints {
			if taint.Key != corev1.TaintNodeNotReady {
				kept = append(kept, taint)
			}
		}
		if len(kept) == len(node.Spec.Taints) {
			return nil
		}
		node.Spec.Taints = kept
		_, err = client.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{})
		if err == nil {
			err = fmt.Errorf("taint removed, checking again")
		}
		return err
	})
}

// waitFor polls check until it succeeds; on timeout it fails the test with
// the last error and the tail of the named log.
func (n *Node) waitFor(timeout time.Duration, what, logName string, check func() error) {
	n.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("node: timed out after %s waiting for %s: %v\nlast lines of %s:\n%s",
				timeout, what, err, logName, proc.TailFile(n.path(logName), 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stop ends the namespaces' init, which kills every process of the node,
// waits for it, and removes the cgroups runc left behind.
func (n *Node) stop() {
	if n.t.Failed() {
		for _, name := range []string{"containerd.log", "kubelet.log"} {
			n.logf("node: last lines of %s:\n%s", name, proc.TailFile(n.path(name), 60))
		}
	}
	if n.holder == nil {
		return
	}
	n.stdin.Close()
	select {
	case <-n.exited:
	case <-time.After(5 * time.Second):
		_ = n.holder.Process.Kill()
		<-n.exited
	}
	for _, p := range n.procs {
		_ = p.Process.Kill() // nsenter; its child died with the PID namespace
	}
	n.detachLoops()
	n.removeCgroups()
}

func freePorts(t testing.TB, count int) []int {
	var ports []int
	for range count {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("node: find a free port: %v", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
