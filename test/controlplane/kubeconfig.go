package controlplane

import (
	"fmt"

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
