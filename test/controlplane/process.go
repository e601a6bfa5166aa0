package controlplane

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is one running component. Its stdout and stderr are appended to
// logPath, which survives restarts of the same component.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once cmd.Wait has returned
	waitErr error         // set before exited is closed
}

// startProcess starts path with args in its own process group. Pdeathsig
// kills it if the test binary dies before it can run its cleanups (a test
// timeout panics past them). Pdeathsig fires when the forking OS thread
// exits; the Go runtime only retires threads of goroutines that exit while
// locked to them, which tests do not do.
func startProcess(name, path string, args []string, logPath string) (*process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	defer log.Close() // the child holds its own copy
	fmt.Fprintf(log, "=== %s: %s %s\n", time.Now().Format(time.RFC3339Nano), path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go p.wait()
	return p, nil
}

func (p *process) wait() {
	p.waitErr = p.cmd.Wait()
	close(p.exited)
}

// exitErr returns a non-nil error once the process has exited.
func (p *process) exitErr() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited: %w", p.name, p.waitErr)
	default:
		return nil
	}
}

// kill sends SIGKILL to the process group and waits for the process to be
// reaped, which also joins the goroutine that waits for it.
func (p *process) kill() {
	// The group may be gone already; ESRCH is the expected error then.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
}

// tailFile returns the last n lines of the file at path.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return tail(data, n)
}
