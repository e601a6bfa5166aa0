package controlplane

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"

	"github.com/volume-agent/volume-agent/test/internal/proc"
)

// File names inside the work directory.
const (
	adminKubeconfig             = "admin.kubeconfig"
	controllerManagerKubeconfig = "kube-controller-manager.kubeconfig"
	schedulerKubeconfig         = "kube-scheduler.kubeconfig"
	schedulerConfig             = "kube-scheduler.yaml"
)

// Options says which optional components to run. The zero value runs etcd
// and kube-apiserver only.
type Options struct {
	// ControllerManager also runs kube-controller-manager (every controller
	// but node lifecycle). Without it nothing binds PersistentVolumes,
	// publishes kube-root-ca.crt or creates default ServiceAccounts.
	ControllerManager bool
	// Scheduler also runs kube-scheduler.
	Scheduler bool
	// Logf receives progress and, when the test fails, the tails of the
	// component logs. Defaults to t.Logf.
	Logf func(format string, args ...any)
}

// ControlPlane is a running control plane owned by one test.
type ControlPlane struct {
	opts   Options
	bin    string // directory with the binaries
	layout layout
	config *rest.Config // admin; never handed out, only copies
	client kubernetes.Interface
	dialer *connrotation.Dialer // every connection made through config

	mu         sync.Mutex
	etcd       *proc.Process   // guarded by mu
	apiserver  *proc.Process   // guarded by mu; nil while stopped
	components []*proc.Process // guarded by mu; controller-manager and scheduler, in start order
}

// Start builds or reuses the binaries, starts the components on free
// loopback ports, waits until each is healthy and registers a cleanup on t
// that kills them all. It calls t.Fatal when anything fails, with the tail
// of the build output or of the failing component's log.
func Start(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	want := []binary{etcdBinary, apiserverBinary}
	if opts.ControllerManager {
		want = append(want, controllerManagerBinary)
	}
	if opts.Scheduler {
		want = append(want, schedulerBinary)
	}
	c := &ControlPlane{opts: opts, bin: ensureBinaries(t, opts.Logf, want...)}
	if err := c.prepare(t.TempDir()); err != nil {
		t.Fatalf("controlplane: %v", err)
	}
	t.Cleanup(func() { c.stopAll(t) })

	c.startEtcd(t)
	c.StartAPIServer(t)
	if opts.ControllerManager {
		c.startControllerManager(t)
	}
	if opts.Scheduler {
		c.startScheduler(t)
	}
	return c
}

// prepare generates the PKI, picks the ports and writes the kubeconfigs.
func (c *ControlPlane) prepare(dir string) error {
	p, err := newPKI(dir)
	if err != nil {
		return err
	}
	ports, err := freePorts(5)
	if err != nil {
		return err
	}
	c.layout = layout{
		dir: dir, pki: p,
		etcdClientPort: ports[0], etcdPeerPort: ports[1], apiserverPort: ports[2],
		controllerManagerPort: ports[3], schedulerPort: ports[4],
	}
	server := c.layout.server()
	files := []struct {
		name string
		user string
		kp   keyPair
	}{
		{adminKubeconfig, "admin", p.admin},
		{controllerManagerKubeconfig, "kube-controller-manager", p.controllerManager},
		{schedulerKubeconfig, "kube-scheduler", p.scheduler},
	}
	for _, f := range files {
		if err := writeKubeconfig(c.layout.path(f.name), server, p.caPEM, f.user, certAuth(f.kp)); err != nil {
			return err
		}
	}
	if err := os.WriteFile(c.layout.path(schedulerConfig), []byte(c.layout.schedulerConfigYAML()), 0o600); err != nil {
		return fmt.Errorf("write scheduler config: %w", err)
	}
	return c.newClient(server)
}

// newClient builds the admin config. Its connections go through one dialer
// so that the cleanup can close them all: client-go would otherwise keep
// idle connections, and their goroutines, past the end of the test.
func (c *ControlPlane) newClient(server string) error {
	p := c.layout.pki
	c.dialer = connrotation.NewDialer((&net.Dialer{}).DialContext)
	c.config = &rest.Config{
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: p.caPEM, CertData: p.admin.cert, KeyData: p.admin.key,
		},
		QPS:   100, // the default 5 would throttle tests
		Burst: 200,
		Dial:  c.dialer.DialContext,
	}
	client, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		return fmt.Errorf("create admin client: %w", err)
	}
	c.client = client
	return nil
}

// stopAll kills every component, newest first, closes the admin client's
// connections and, when the test failed, logs the tails of all logs.
func (c *ControlPlane) stopAll(t testing.TB) {
	c.mu.Lock()
	var procs []*proc.Process // in start order
	for _, p := range append([]*proc.Process{c.etcd, c.apiserver}, c.components...) {
		if p != nil {
			procs = append(procs, p)
		}
	}
	c.etcd, c.apiserver, c.components = nil, nil, nil
	c.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Kill()
	}
	c.dialer.CloseAll()
	if t.Failed() {
		c.logTails()
	}
}

// logTails logs the end of every component log there is.
func (c *ControlPlane) logTails() {
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		path := c.layout.logPath(name)
		if _, err := os.Stat(path); err == nil {
			c.opts.Logf("controlplane: last lines of %s:\n%s", path, proc.TailFile(path, 30))
		}
	}
}

// AdminKubeconfig returns the path of a kubeconfig that authenticates with a
// client certificate in group system:masters (cluster-admin).
func (c *ControlPlane) AdminKubeconfig() string { return c.layout.path(adminKubeconfig) }

// AdminConfig returns a copy of the cluster-admin client config.
func (c *ControlPlane) AdminConfig() *rest.Config { return rest.CopyConfig(c.config) }

// Client returns a cluster-admin clientset.
func (c *ControlPlane) Client() kubernetes.Interface { return c.client }

// Server returns the kube-apiserver URL, https://127.0.0.1:PORT.
func (c *ControlPlane) Server() string { return c.layout.server() }

// CACert returns the PEM of the CA that signed the kube-apiserver serving
// certificate and every client certificate; it is also what kube-root-ca.crt
// holds.
func (c *ControlPlane) CACert() []byte { return append([]byte(nil), c.layout.pki.caPEM...) }

// KubeconfigForToken writes a kubeconfig that authenticates with the bearer
// token, for example a ServiceAccount token from TokenRequest, into a
// temporary directory of t and returns its path.
func (c *ControlPlane) KubeconfigForToken(t testing.TB, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token.kubeconfig")
	if err := writeKubeconfig(path, c.Server(), c.layout.pki.caPEM, "token", tokenAuth(token)); err != nil {
		t.Fatalf("controlplane: %v", err)
	}
	return path
}

// freePorts returns n distinct free loopback ports. They are free when
// returned; a port taken by someone else before a component binds it makes
// that component fail to start, which the readiness check reports.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close() // hold every port until all are picked, so they differ
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
