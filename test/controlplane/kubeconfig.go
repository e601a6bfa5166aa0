package controlplane

import (
	"cmp"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes a self-contained kubeconfig (certificates and keys
// embedded) for server that authenticates as user with auth.
func writeKubeconfig(path, server string, caPEM []byte, user string, auth *clientcmdapi.AuthInfo) error {
	const name = "volume-agent-test"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = auth
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = name
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// certAuth authenticates with a client certificate.
func certAuth(kp keyPair) *clientcmdapi.AuthInfo {
	return &clientcmdapi.AuthInfo{ClientCertificateData: kp.cert, ClientKeyData: kp.key}
}

// tokenAuth authenticates with a bearer token.
func tokenAuth(token string) *clientcmdapi.AuthInfo {
	return &clientcmdapi.AuthInfo{Token: token}
}

// NodeKubeconfig writes a kubeconfig for a kubelet on node into a temporary
// directory of t and returns its path. It authenticates with a client
// certificate for CN=system:node:<node>, O=system:nodes: the identity the
// Node authorizer and the NodeRestriction admission plugin expect, so the
// kubelet gets exactly a node's rights.
func (c *ControlPlane) NodeKubeconfig(t testing.TB, node string) string {
	t.Helper()
	kp, err := c.layout.pki.ca.issue(clientTemplate("system:node:"+node, "system:nodes"))
	if err != nil {
		t.Fatalf("controlplane: %v", err)
	}
	path := filepath.Join(t.TempDir(), "kubelet.kubeconfig")
	if err := writeKubeconfig(path, c.Server(), c.layout.pki.caPEM, "system:node:"+node, certAuth(kp)); err != nil {
		t.Fatalf("controlplane: %v", err)
	}
	return path
}

// NodeCredentials are a node's client certificate and key kept as files,
// with a kubeconfig that refers to them by path — the layout of a kubeadm
// node (/etc/kubernetes/kubelet.conf naming
// /var/lib/kubelet/pki/kubelet-client-current.pem). Rotate replaces the
// files as the kubelet's certificate manager does, so a client that
// reloads them authenticates with the new certificate.
type NodeCredentials struct {
	// Kubeconfig is the kubeconfig's path.
	Kubeconfig string
	// CertFile holds the certificate and then its key, in one PEM file,
	// like kubelet-client-current.pem.
	CertFile string

	node string
	ca   *authority
}

// NodeCredentials issues a certificate for CN=system:node:<node>,
// O=system:nodes valid for validity (24h when 0) and writes it, with a
// kubeconfig referring to it, into a temporary directory of t.
func (c *ControlPlane) NodeCredentials(t testing.TB, node string, validity time.Duration) *NodeCredentials {
	t.Helper()
	dir := t.TempDir()
	return c.NodeCredentialsAt(t, node, CredentialFiles{
		Kubeconfig: filepath.Join(dir, "kubelet.conf"),
		CertFile:   filepath.Join(dir, "pki", "kubelet-client-current.pem"),
		Validity:   validity,
	})
}

// CredentialFiles says where NodeCredentialsAt writes.
type CredentialFiles struct {
	Kubeconfig, CertFile string
	// CertFileSeenAs is the path the kubeconfig names the certificate
	// by, for a kubelet whose mount namespace sees CertFile elsewhere;
	// default CertFile.
	CertFileSeenAs string
	// Validity of the first certificate; 24h when 0.
	Validity time.Duration
}

// NodeCredentialsAt is NodeCredentials with the files where f says.
func (c *ControlPlane) NodeCredentialsAt(t testing.TB, node string, f CredentialFiles) *NodeCredentials {
	t.Helper()
	n := &NodeCredentials{Kubeconfig: f.Kubeconfig, CertFile: f.CertFile, node: node, ca: c.layout.pki.ca}
	for _, file := range []string{f.Kubeconfig, f.CertFile} {
		if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
			t.Fatalf("controlplane: %v", err)
		}
	}
	n.Rotate(t, f.Validity)
	seen := cmp.Or(f.CertFileSeenAs, f.CertFile)
	auth := &clientcmdapi.AuthInfo{ClientCertificate: seen, ClientKey: seen}
	if err := writeKubeconfig(n.Kubeconfig, c.Server(), c.layout.pki.caPEM, "system:node:"+node, auth); err != nil {
		t.Fatalf("controlplane: %v", err)
	}
	return n
}

// Rotate issues a new certificate and key valid for validity from now (24h
// when 0) and replaces CertFile with them in one rename. It returns the new
// certificate's serial number.
func (n *NodeCredentials) Rotate(t testing.TB, validity time.Duration) *big.Int {
	t.Helper()
	tmpl := clientTemplate("system:node:"+n.node, "system:nodes")
	if validity > 0 {
		tmpl.NotAfter = time.Now().Add(validity)
	}
	kp, err := n.ca.issue(tmpl)
	if err != nil {
		t.Fatalf("controlplane: %v", err)
	}
	tmp := n.CertFile + ".tmp"
	if err := os.WriteFile(tmp, append(kp.cert, kp.key...), 0o600); err != nil {
		t.Fatalf("controlplane: %v", err)
	}
	if err := os.Rename(tmp, n.CertFile); err != nil {
		t.Fatalf("controlplane: %v", err)
	}
	return tmpl.SerialNumber
}
