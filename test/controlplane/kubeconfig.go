package controlplane

import (
	"fmt"
	"path/filepath"
	"testing"

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
