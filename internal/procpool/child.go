package procpool

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is a started child: *exec.Cmd's, or a fake in tests.
type process interface {
	// Kill sends SIGKILL; it takes effect once the kernel lets the
	// process go.
	Kill() error
	// Wait reaps the process, blocking until it has exited.
	Wait() error
	// Pid identifies the process in logs.
	Pid() int
}

// child is one child process and the agent's ends of its pipes. It is
// used by one request at a time: whoever took it from the pool.
type child struct {
	proc process
	in   *os.File      // the write end of the child's standard input
	out  *os.File      // the read end of the child's standard output
	rd   *bufio.Reader // reads out
	// sock is the agent's end of the child's descriptor 3, on which it
	// passes descriptors (Config.PassFiles); -1 without.
	sock int
	id   uint32 // the number of the last request sent
	// usedAt is when the child last answered, while it is idle.
	usedAt time.Time
}

func newChild(proc process, in, out *os.File) *child {
	return &child{proc: proc, in: in, out: out, rd: bufio.NewReader(out), sock: -1}
}

// errNoAnswer is the cause of the error of a request whose context ended
// before the child answered.
var errNoAnswer = ErrNoAnswer

// errNotSent is the cause of the error of a request that no child read:
// the child had exited before it was sent.
var errNotSent = errors.New("child process gone before the request was sent")

// exchange sends req and reads the answer, and the descriptor passed with
// it if the child has a socket for them, giving up when ctx ends. The
// pipes are in the Go runtime's poller: a deadline, set from ctx's
// deadline and moved to now when ctx is cancelled, wakes the read up.
func (c *child) exchange(ctx context.Context, req []byte) ([]byte, *os.File, error) {
	answer, err := c.send(ctx, req)
	if err != nil || c.sock < 0 {
		return answer, nil, err
	}
	f, err := c.receiveFile()
	if err != nil {
		return nil, nil, err
	}
	return answer, f, nil
}

// send sends req and reads the answer, giving up when ctx ends.
func (c *child) send(ctx context.Context, req []byte) ([]byte, error) {
	deadline, _ := ctx.Deadline() // the zero time clears an earlier deadline
	if err := c.setDeadline(deadline); err != nil {
		return nil, err
	}
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = c.setDeadline(time.Now())
		close(cancelled)
	})
	defer func() {
		if !stop() {
			<-cancelled // the deadline it moves is this request's, not the next one's
		}
	}()
	c.id++
	if _, err := c.in.Write(appendFrame(nil, c.id, req)); err != nil {
		if errors.Is(err, syscall.EPIPE) { // no reader: the child is gone
			return nil, fmt.Errorf("send request to child process %d: %w: %w", c.proc.Pid(), errNotSent, err)
		}
		return nil, c.failed(ctx, "send request", err)
	}
	id, answer, err := readFrame(c.rd)
	switch {
	case err != nil:
		return nil, c.failed(ctx, "read answer", err)
	case id != c.id:
		return nil, fmt.Errorf("child process %d answered request %d to request %d: %w", c.proc.Pid(), id, c.id, ErrFrame)
	}
	return answer, nil
}

func (c *child) setDeadline(t time.Time) error {
	if err := c.in.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.out.SetReadDeadline(t)
}

// failed names the error of a failed send or read: the context's when it
// ended, else what the pipe said (the child died, or sent garbage).
func (c *child) failed(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) { // the pipe's deadline may pass a moment before ctx's
		return fmt.Errorf("child process %d: %w: %w", c.proc.Pid(), errNoAnswer, cmp.Or(ctx.Err(), context.DeadlineExceeded))
	}
	return fmt.Errorf("%s of child process %d: %w", what, c.proc.Pid(), err)
}

// kill closes the agent's ends of the pipes and SIGKILLs the child; it
// never waits.
func (c *child) kill() {
	_ = c.in.Close()
	_ = c.out.Close()
	if c.sock >= 0 {
		_ = syscall.Close(c.sock)
		c.sock = -1
	}
	_ = c.proc.Kill()
}

// startProcess starts a child running command, its standard input and
// output connected to pipes and its standard error to stderr (nil:
// /dev/null).
func startProcess(command []string, stderr *os.File, passFiles bool) (_ *child, retErr error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		_, _ = inR.Close(), inW.Close()
		return nil, err
	}
	defer func() {
		// The child has its own copies of its ends; the agent's must go,
		// or the agent would never see the child's output end.
		_, _ = inR.Close(), outW.Close()
		if retErr != nil {
			_, _ = inW.Close(), outR.Close()
		}
	}()
	cmd := exec.Command(command[0], command[1:]...) //nolint:gosec // G204: the agent's own binary, from its Config
	cmd.Stdin, cmd.Stdout = inR, outW
	sock := -1
	if passFiles {
		agentEnd, childEnd, err := socketPair()
		if err != nil {
			return nil, err
		}
		defer func() { _ = childEnd.Close() }() // the child has its copy
		defer func() {
			if retErr != nil {
				_ = syscall.Close(agentEnd)
			}
		}()
		cmd.ExtraFiles = []*os.File{childEnd}
		sock = agentEnd
	}
	if stderr != nil {
		cmd.Stderr = stderr // an *os.File: no copying goroutine for Wait to wait for
	}
	// Pdeathsig: a SIGKILLed agent takes its children along, whatever
	// they are doing (Go checks in the child that the parent did not die
	// before the setting took). The signal follows the thread that forked:
	// Go ends a thread only when a goroutine locked to it (LockOSThread)
	// returns, which the agent never does; were one to, the child would
	// die: the request it answers would fail, and an idle one be replaced.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start child process: %w", err)
	}
	c := newChild(cmdProcess{cmd}, inW, outR)
	c.sock = sock
	return c, nil
}

// cmdProcess is a child started by exec.
type cmdProcess struct{ cmd *exec.Cmd }

func (p cmdProcess) Kill() error { return p.cmd.Process.Kill() }
func (p cmdProcess) Wait() error { return p.cmd.Wait() }
func (p cmdProcess) Pid() int    { return p.cmd.Process.Pid }
