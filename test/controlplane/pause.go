package controlplane

import (
	"syscall"
	"testing"

	"github.com/volume-agent/volume-agent/test/internal/proc"
)

// PauseAPIServer stops kube-apiserver with SIGSTOP: a hung API server. The
// kernel still accepts connections on its port, but nothing answers: open
// connections go silent and new TLS handshakes time out. Requests made with
// Client meanwhile hang too. ResumeAPIServer continues it; a cleanup on t
// does so if the test ends first, so that later tests find it running.
func (c *ControlPlane) PauseAPIServer(t testing.TB) {
	t.Helper()
	p := c.runningAPIServer(t)
	if err := p.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("controlplane: pause kube-apiserver: %v", err)
	}
	t.Cleanup(func() { _ = p.Cmd.Process.Signal(syscall.SIGCONT) })
}

// ResumeAPIServer continues kube-apiserver after PauseAPIServer.
func (c *ControlPlane) ResumeAPIServer(t testing.TB) {
	t.Helper()
	if err := c.runningAPIServer(t).Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("controlplane: resume kube-apiserver: %v", err)
	}
}

func (c *ControlPlane) runningAPIServer(t testing.TB) *proc.Process {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apiserver == nil {
		t.Fatalf("controlplane: kube-apiserver is not running")
	}
	return c.apiserver
}
