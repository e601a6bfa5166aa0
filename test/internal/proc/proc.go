// Package proc runs the programs tests start on the host (control plane
// components, CSI sidecars) with their output in a log file, and reads the
// end of such logs for failure messages.
package proc

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Process is one running program. Its standard output and error are
// appended to a log file, which survives restarts of the same program.
type Process struct {
	Name    string
	LogPath string
	Cmd     *exec.Cmd
	exited  chan struct{} // closed once Cmd.Wait has returned
	waitErr error         // set before exited is closed
}

// Start starts path with args (and env added to the test's environment) in
// its own process group. Pdeathsig kills it if the test binary dies before
// it can run its cleanups (a test timeout panics past them). Pdeathsig
// fires when the forking OS thread exits; the Go runtime only retires
// threads of goroutines that exit while locked to them, which tests do not
// do.
func Start(name, path, logPath string, env, args []string) (*Process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	defer log.Close() // the child holds its own copy
	fmt.Fprintf(log, "=== %s: %s %s\n", time.Now().Format(time.RFC3339Nano), path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, Cmd: cmd, exited: make(chan struct{})}
	go p.wait()
	return p, nil
}

func (p *Process) wait() {
	p.waitErr = p.Cmd.Wait()
	close(p.exited)
}

// Exited returns a channel closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitErr returns nil while the process runs, then how it ended.
func (p *Process) ExitErr() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited: %w", p.Name, p.waitErr)
	default:
		return nil
	}
}

// Kill sends SIGKILL to the process group and waits for the process to be
// reaped, which also joins the goroutine that waits for it.
func (p *Process) Kill() {
	// The group may be gone already; ESRCH is the expected error then.
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
}

// Log returns what the process has written so far.
func (p *Process) Log() string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return string(data)
}

// Tail returns the last n lines of the process's log.
func (p *Process) Tail(n int) string { return TailFile(p.LogPath, n) }

// Tail returns the last n lines of b.
func Tail(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// TailFile returns the last n lines of the file at path, or why it could
// not be read.
func TailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return Tail(data, n)
}
