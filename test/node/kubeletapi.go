package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
)

// kubeletServingCert is the certificate the kubelet made for its API (no
// tlsCertFile is configured), in its default --cert-dir: a leaf for the
// node's name and the CA that signed it.
const kubeletServingCert = KubeletCertDir + "/kubelet.crt"

// KubeletGet GETs path (for example "/metrics") from the kubelet's own
// HTTPS API on 127.0.0.1 and returns the body of a 200 answer. The kubelet
// authenticates clients by certificates of the cluster CA (kubeletConfig):
// cfg's client certificate, the control plane's admin one for instance.
// The kubelet's serving certificate is self-signed; it is trusted, alone,
// from the node's file, for the node's name.
func (n *Node) KubeletGet(ctx context.Context, cfg *rest.Config, path string) ([]byte, error) {
	client, err := n.kubeletClient(cfg)
	if err != nil {
		return nil, err
	}
	defer client.CloseIdleConnections()
	url := "https://127.0.0.1:" + strconv.Itoa(n.port) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kubelet %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("kubelet %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("kubelet %s: %s: %.200s", path, resp.Status, body)
	}
	return body, nil
}

func (n *Node) kubeletClient(cfg *rest.Config) (*http.Client, error) {
	cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	if err != nil {
		return nil, fmt.Errorf("kubelet API: the client certificate of the config: %w", err)
	}
	served, err := os.ReadFile(n.Path(kubeletServingCert))
	if err != nil {
		return nil, fmt.Errorf("kubelet API: its serving certificate: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(served) {
		return nil, fmt.Errorf("kubelet API: no certificate in %s", kubeletServingCert)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: roots, ServerName: n.name, MinVersion: tls.VersionTLS12,
	}}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, nil
}
