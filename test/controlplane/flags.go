package controlplane

import (
	"fmt"
	"path/filepath"
	"strconv"
)

// issuer is the service-account token issuer and the default API audience.
const issuer = "https://kubernetes.default.svc.cluster.local"

// layout is where one control plane keeps its files and which loopback
// ports its components listen on. The flag builders below are pure
// functions of it, so a restarted component gets exactly the same flags.
type layout struct {
	dir                   string // work directory: data, logs, kubeconfigs
	pki                   *pki
	etcdClientPort        int
	etcdPeerPort          int
	apiserverPort         int
	controllerManagerPort int
	schedulerPort         int
}

func (l *layout) path(name string) string { return filepath.Join(l.dir, name) }

// logPath is where the component's stdout and stderr go.
func (l *layout) logPath(component string) string { return l.path(component + ".log") }

func (l *layout) etcdURL() string     { return loopbackURL("http", l.etcdClientPort) }
func (l *layout) server() string      { return loopbackURL("https", l.apiserverPort) }
func (l *layout) etcdPeerURL() string { return loopbackURL("http", l.etcdPeerPort) }

func loopbackURL(scheme string, port int) string {
	return fmt.Sprintf("%s://127.0.0.1:%d", scheme, port)
}

// etcdArgs runs a single-member etcd with plain http on loopback. fsync is
// off: the data lives in a temporary directory and dies with the test.
func (l *layout) etcdArgs() []string {
	return []string{
		"--name=default",
		"--data-dir=" + l.path("etcd-data"),
		"--listen-client-urls=" + l.etcdURL(),
		"--advertise-client-urls=" + l.etcdURL(),
		"--listen-peer-urls=" + l.etcdPeerURL(),
		"--initial-advertise-peer-urls=" + l.etcdPeerURL(),
		"--initial-cluster=default=" + l.etcdPeerURL(),
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
}

// apiserverArgs keeps the default admission plugins (ServiceAccount
// admission among them, so pods get a kube-api-access-* volume) and adds
// NodeRestriction, which is not among them: with the Node authorizer it is
// what a real cluster (kubeadm, EKS, GKE, k3s) uses to hold a
// system:node:<name> identity to its own Node, its own pods and tokens
// bound to them. The
// endpoint reconciler is off: it would try every 10s to publish the
// loopback advertise address as the endpoint of the "kubernetes" Service,
// which validation rejects, and nothing in a test routes through that
// Service.
func (l *layout) apiserverArgs() []string {
	p := l.pki
	return []string{
		"--etcd-servers=" + l.etcdURL(),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(l.apiserverPort),
		"--cert-dir=" + l.path("apiserver-certs"), // unused: the serving cert is given below
		"--tls-cert-file=" + p.path(servingCert),
		"--tls-private-key-file=" + p.path(servingKey),
		"--client-ca-file=" + p.path(caCertFile),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=" + issuer,
		"--service-account-key-file=" + p.path(saPublicFile),
		"--service-account-signing-key-file=" + p.path(saPrivateFile),
		"--api-audiences=" + issuer,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}
}

// controllerManagerArgs disables the node lifecycle controller (test Nodes
// have no kubelet and would be tainted unreachable) and syncs volume binding
// every 2s instead of every 15s.
//
// Neither it nor the scheduler gets --authentication-kubeconfig: delegated
// authentication wants the requestheader CA in the
// extension-apiserver-authentication ConfigMap, which this kube-apiserver
// (no front proxy) does not publish, and would log errors forever. Their
// HTTPS ports then serve only the always-allowed /healthz, /readyz and
// /livez, which is all the harness uses.
func (l *layout) controllerManagerArgs() []string {
	p := l.pki
	return []string{
		"--kubeconfig=" + l.path(controllerManagerKubeconfig),
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(l.controllerManagerPort),
		"--tls-cert-file=" + p.path(servingCert),
		"--tls-private-key-file=" + p.path(servingKey),
		"--leader-elect=false",
		"--controllers=*,-node-lifecycle-controller",
		"--pvclaimbinder-sync-period=2s",
		"--root-ca-file=" + p.path(caCertFile),
		"--service-account-private-key-file=" + p.path(saPrivateFile),
		"--use-service-account-credentials=true",
		"--cluster-signing-cert-file=" + p.path(caCertFile),
		"--cluster-signing-key-file=" + p.path(caKeyFile),
		"--profiling=false",
	}
}

func (l *layout) schedulerArgs() []string {
	p := l.pki
	return []string{
		"--config=" + l.path(schedulerConfig),
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(l.schedulerPort),
		"--tls-cert-file=" + p.path(servingCert),
		"--tls-private-key-file=" + p.path(servingKey),
	}
}

// schedulerConfigYAML is the KubeSchedulerConfiguration: the kubeconfig and
// leader election live there rather than in deprecated flags.
func (l *layout) schedulerConfigYAML() string {
	return fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
leaderElection:
  leaderElect: false
`, l.path(schedulerKubeconfig))
}
