package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// File names inside the PKI directory.
const (
	caCertFile    = "ca.crt"
	caKeyFile     = "ca.key"
	servingCert   = "serving.crt" // kube-apiserver, and the loopback health endpoints of the others
	servingKey    = "serving.key"
	saPrivateFile = "sa.key"
	saPublicFile  = "sa.pub"
)

// keyPair is a PEM-encoded certificate and its private key.
type keyPair struct {
	cert, key []byte
}

// pki is the throw-away certificate material of one control plane. Every key
// is ECDSA P-256: quick to generate, and accepted by every component for
// serving, client and service-account signing keys.
type pki struct {
	dir               string
	ca                *authority // issues node client certificates on request
	caPEM             []byte
	admin             keyPair // CN=admin, O=system:masters
	controllerManager keyPair // CN=system:kube-controller-manager
	scheduler         keyPair // CN=system:kube-scheduler
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// newPKI generates a CA, a serving certificate for 127.0.0.1 and localhost,
// client certificates for the admin and the components, and the
// service-account signing key pair, and writes the files the processes read
// into dir.
func newPKI(dir string) (*pki, error) {
	ca, err := newAuthority()
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, ca: ca, caPEM: ca.certPEM}
	serving, err := ca.issue(servingTemplate())
	if err != nil {
		return nil, err
	}
	clients := []struct {
		to     *keyPair
		cn, on string
	}{
		{&p.admin, "admin", "system:masters"},
		{&p.controllerManager, "system:kube-controller-manager", ""},
		{&p.scheduler, "system:kube-scheduler", ""},
	}
	for _, c := range clients {
		if *c.to, err = ca.issue(clientTemplate(c.cn, c.on)); err != nil {
			return nil, err
		}
	}
	saPriv, saPub, err := serviceAccountKeys()
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		caCertFile:    ca.certPEM,
		caKeyFile:     ca.keyPEM,
		servingCert:   serving.cert,
		servingKey:    serving.key,
		saPrivateFile: saPriv,
		saPublicFile:  saPub,
	}
	for name, data := range files {
		if err := os.WriteFile(p.path(name), data, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", name, err)
		}
	}
	return p, nil
}

// authority is a self-signed CA that issues leaf certificates.
type authority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

func newAuthority() (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := baseTemplate(pkix.Name{CommonName: "volume-agent-test-ca"})
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key, certPEM: encodeCert(der), keyPEM: keyPEM}, nil
}

// issue signs tmpl with a fresh key.
func (a *authority) issue(tmpl *x509.Certificate) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generate key for %q: %w", tmpl.Subject.CommonName, err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return keyPair{}, fmt.Errorf("sign certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{cert: encodeCert(der), key: keyPEM}, nil
}

func servingTemplate() *x509.Certificate {
	tmpl := baseTemplate(pkix.Name{CommonName: "kube-apiserver"})
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)}
	tmpl.DNSNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	return tmpl
}

func clientTemplate(cn, org string) *x509.Certificate {
	name := pkix.Name{CommonName: cn}
	if org != "" {
		name.Organization = []string{org}
	}
	tmpl := baseTemplate(name)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return tmpl
}

func baseTemplate(name pkix.Name) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62)) // crypto/rand does not fail
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      name,
		NotBefore:    now.Add(-time.Hour), // tolerate clock skew between processes
		NotAfter:     now.Add(24 * time.Hour),
	}
}

// serviceAccountKeys returns the PEM private and public key that sign and
// verify service-account tokens.
func serviceAccountKeys() (priv, pub []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate service-account key: %w", err)
	}
	if priv, err = encodeKey(key); err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("encode service-account public key: %w", err)
	}
	return priv, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
