package procpool

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// realPool is a pool of real children, of this binary.
func realPool(t *testing.T) *Pool {
	t.Helper()
	p, err := New(Config{Command: childCommand, Size: 1, Stderr: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		p.reaping.Wait()
	})
	return p
}

func childPid(t *testing.T, p *Pool) int {
	t.Helper()
	pid, err := strconv.Atoi(string(do(t, p, "pid?")))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitGone waits until process pid has exited: it no longer exists, or
// it is a zombie that its parent did not reap yet, whose other threads
// have all exited (its descriptors are closed only then).
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(liveness)
	for time.Now().Before(deadline) {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		// The state follows the command's closing parenthesis.
		if _, after, ok := strings.Cut(string(stat), ") "); ok && strings.HasPrefix(after, "Z") && len(tasks) <= 1 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: process %d still runs", what, pid)
}

// TestDeadChildReplaced: an idle child that was killed is replaced, and
// the request that found it dead is answered by the replacement.
func TestDeadChildReplaced(t *testing.T) {
	p := realPool(t)
	first := childPid(t, p)
	if again := childPid(t, p); again != first {
		t.Fatalf("child %d answered, then child %d: an idle child was not reused", first, again)
	}
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, first, "SIGKILL")
	if next := childPid(t, p); next == first {
		t.Fatalf("the dead child %d answered", next)
	}
}

// TestCloseStopsChildren: after Close no child runs.
func TestCloseStopsChildren(t *testing.T) {
	p := realPool(t)
	pid := childPid(t, p)
	p.Close()
	p.reaping.Wait()
	waitGone(t, pid, "Close")
}

// TestChildExitsAtEndOfInput: a child whose agent closes its end of the
// pipe exits, without a signal.
func TestChildExitsAtEndOfInput(t *testing.T) {
	cmd := exec.Command(childCommand[0], childCommand[1:]...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("child at the end of its input: %v, want exit 0", err)
		}
	case <-time.After(liveness):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("child still runs after the end of its input")
	}
}

// TestKilledAgentLeavesNoChild: SIGKILL an agent, and its child goes too.
func TestKilledAgentLeavesNoChild(t *testing.T) {
	agent := exec.CommandContext(context.Background(), "/proc/self/exe", agentArg)
	agent.Stderr = os.Stderr
	out, err := agent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = agent.Process.Kill()
		_ = agent.Wait()
		t.Fatalf("read the child's pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = agent.Wait()
	waitGone(t, pid, "SIGKILL of its agent")
}

// TestPassFile: a real child passes a descriptor with its answer; an
// answer without one carries none.
func TestPassFile(t *testing.T) {
	p, err := New(Config{Command: filesChildCommand, Size: 1, PassFiles: true, Stderr: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		p.reaping.Wait()
	})
	for range 3 {
		answer, f, err := p.DoFile(context.Background(), []byte("file?"), func() {})
		if err != nil || string(answer) != "root" || f == nil {
			t.Fatalf("DoFile: %q, %v, %v; want root and a file", answer, f, err)
		}
		var got, want syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &got); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		if err := syscall.Stat("/", &want); err != nil {
			t.Fatal(err)
		}
		if got.Dev != want.Dev || got.Ino != want.Ino {
			t.Fatalf("the file passed is %d:%d, want / (%d:%d)", got.Dev, got.Ino, want.Dev, want.Ino)
		}
		answer, f, err = p.DoFile(context.Background(), []byte("pid?"), func() {})
		if err != nil || f != nil || len(answer) == 0 {
			t.Fatalf("DoFile without a file: %q, %v, %v", answer, f, err)
		}
	}
}
