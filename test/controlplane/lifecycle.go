package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/volume-agent/volume-agent/test/internal/proc"
)

const (
	// readyTimeout bounds the wait for one component to become healthy.
	readyTimeout = 60 * time.Second
	// pollInterval is short on purpose: this is a test harness and every
	// test waits for it.
	pollInterval = 100 * time.Millisecond
	// checkTimeout bounds one health request.
	checkTimeout = 5 * time.Second
)

func (c *ControlPlane) startEtcd(t testing.TB) {
	t.Helper()
	p := c.start(t, etcdBinary.name, c.layout.etcdArgs())
	c.mu.Lock()
	c.etcd = p
	c.mu.Unlock()
	rt := &http.Transport{DisableKeepAlives: true}
	c.waitHealthy(t, p, func(ctx context.Context) error {
		return getOK(ctx, rt, c.layout.etcdURL()+"/health")
	})
}

// StartAPIServer starts kube-apiserver with the flags, ports and
// certificates it had before StopAPIServer, and waits until /readyz passes.
func (c *ControlPlane) StartAPIServer(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	if c.apiserver != nil {
		c.mu.Unlock()
		t.Fatalf("controlplane: kube-apiserver is already running")
	}
	p := c.start(t, apiserverBinary.name, c.layout.apiserverArgs())
	c.apiserver = p
	c.mu.Unlock()
	c.waitHealthy(t, p, func(ctx context.Context) error {
		return c.client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
	})
}

// StopAPIServer kills kube-apiserver with SIGKILL and waits until it is gone.
// The other components keep running and retry, as they would in a cluster.
func (c *ControlPlane) StopAPIServer(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	p := c.apiserver
	c.apiserver = nil
	c.mu.Unlock()
	if p == nil {
		t.Fatalf("controlplane: kube-apiserver is not running")
	}
	p.Kill()
}

// RestartAPIServer kills kube-apiserver with SIGKILL, starts it again with
// the same flags, ports and certificates, and waits until /readyz passes.
func (c *ControlPlane) RestartAPIServer(t testing.TB) {
	t.Helper()
	c.StopAPIServer(t)
	c.StartAPIServer(t)
}

func (c *ControlPlane) startControllerManager(t testing.TB) {
	t.Helper()
	c.startComponent(t, controllerManagerBinary.name, c.layout.controllerManagerArgs(), c.layout.controllerManagerPort)
}

func (c *ControlPlane) startScheduler(t testing.TB) {
	t.Helper()
	c.startComponent(t, schedulerBinary.name, c.layout.schedulerArgs(), c.layout.schedulerPort)
}

// startComponent starts a component that serves /healthz over TLS with the
// shared serving certificate on port, and waits until that passes.
func (c *ControlPlane) startComponent(t testing.TB, name string, args []string, port int) {
	t.Helper()
	p := c.start(t, name, args)
	c.mu.Lock()
	c.components = append(c.components, p)
	c.mu.Unlock()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(c.layout.pki.caPEM)
	rt := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}
	c.waitHealthy(t, p, func(ctx context.Context) error {
		return getOK(ctx, rt, loopbackURL("https", port)+"/healthz")
	})
}

func (c *ControlPlane) start(t testing.TB, name string, args []string) *proc.Process {
	t.Helper()
	p, err := startProcess(name, filepath.Join(c.bin, name), args, c.layout.logPath(name))
	if err != nil {
		t.Fatalf("controlplane: %v", err)
	}
	return p
}

// waitHealthy polls check until it passes, p exits or readyTimeout passes;
// then it fails the test with the tail of p's log.
func (c *ControlPlane) waitHealthy(t testing.TB, p *proc.Process, check func(context.Context) error) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), readyTimeout)
	defer cancel()
	var last error
	err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		if err := p.ExitErr(); err != nil {
			return false, err
		}
		ctx, cancel := context.WithTimeout(ctx, checkTimeout)
		defer cancel()
		last = check(ctx)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("controlplane: %s not healthy: %v (last check: %v); last lines of %s:\n%s",
			p.Name, err, last, p.LogPath, proc.TailFile(p.LogPath, 40))
	}
	c.opts.Logf("controlplane: %s healthy after %s", p.Name, time.Since(start).Round(time.Millisecond))
}

// getOK returns nil if GET url answers 200.
func getOK(ctx context.Context, rt http.RoundTripper, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return nil
}
