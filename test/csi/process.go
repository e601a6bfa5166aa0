package csi

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Process is one program of All running on the host, its standard output
// and error in a log file, killed by the test's cleanup.
type Process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once cmd.Wait has returned
	waitErr error         // set before exited is closed
}

// Run starts the program b with args on the host, logging into a file of
// the test's temporary directory, and registers a cleanup that kills it
// (and logs the tail of its log when the test failed). Pdeathsig kills it
// if the test binary dies before its cleanups run (a test timeout panics
// past them).
func Run(t testing.TB, b Binary, env []string, args ...string) *Process {
	t.Helper()
	p, err := start(Path(t, b), b.Name, t.TempDir()+"/"+b.Name+".log", env, args)
	if err != nil {
		t.Fatalf("csi: %v", err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("csi: last lines of the %s log:\n%s", p.name, p.Tail(40))
		}
	})
	return p
}

func start(path, name, logPath string, env, args []string) (*Process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	defer log.Close() // the child holds its own copy
	fmt.Fprintf(log, "=== %s: %s %s\n", time.Now().Format(time.RFC3339Nano), path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go p.wait()
	return p, nil
}

func (p *Process) wait() {
	p.waitErr = p.cmd.Wait()
	close(p.exited)
}

// Exited returns a channel closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitErr returns nil while the process runs, then how it ended.
func (p *Process) ExitErr() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited: %w", p.name, p.waitErr)
	default:
		return nil
	}
}

// Kill sends SIGKILL to the process group and waits for the process to be
// reaped, which also joins the goroutine that waits for it.
func (p *Process) Kill() {
	// The group may be gone already; ESRCH is the expected error then.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
}

// Log returns what the process has written so far.
func (p *Process) Log() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return string(data)
}

// Tail returns the last n lines of the process's log.
func (p *Process) Tail(n int) string { return tail([]byte(p.Log()), n) }
