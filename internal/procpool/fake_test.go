package procpool

import (
	"bytes"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
)

// fakeChildren starts children served by goroutines of the test. A child
// asked "hang" blocks until the test calls unhang, whether killed or not,
// as a process waiting on a hung FUSE server does: until then it cannot be
// reaped.
type fakeChildren struct {
	t *testing.T
	// serves is how the n-th child serves its pipes; children past its
	// end echo.
	serves  []func(in, out *os.File)
	started atomic.Int32
	mu      sync.Mutex
	procs   []*fakeProc   // guarded by mu: the children started, in order
	hanging chan int      // gets a child's pid once it hangs
	unhung  chan struct{} // closed by unhang
	once    sync.Once
}

func newFakeChildren(t *testing.T, serves ...func(in, out *os.File)) *fakeChildren {
	f := &fakeChildren{t: t, serves: serves, hanging: make(chan int, 16), unhung: make(chan struct{})}
	t.Cleanup(f.unhang) // or the reapers would outlive the test
	return f
}

func (f *fakeChildren) unhang() { f.once.Do(func() { close(f.unhung) }) }

// pool returns a pool of size children of f.
func (f *fakeChildren) pool(size int) *Pool {
	p := newPool(fixed(size, time.Hour), zap.NewNop(), f.start)
	f.t.Cleanup(p.Close)
	return p
}

func (f *fakeChildren) start() (*child, error) {
	n := int(f.started.Add(1))
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	serve := f.echo(n)
	if n <= len(f.serves) {
		serve = f.serves[n-1]
	}
	proc := &fakeProc{pid: n, stdin: inR, exited: make(chan struct{})}
	f.mu.Lock()
	f.procs = append(f.procs, proc)
	f.mu.Unlock()
	go func() {
		defer close(proc.exited)
		serve(inR, outW)
		_, _ = inR.Close(), outW.Close()
	}()
	return newChild(proc, inW, outR), nil
}

// proc returns the n-th child started (from 1).
func (f *fakeChildren) proc(n int) *fakeProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.procs[n-1]
}

// echo serves requests by answering them with the child's number, a
// space and the request, and hangs on "hang".
func (f *fakeChildren) echo(n int) func(in, out *os.File) {
	return func(in, out *os.File) {
		_ = Serve(in, out, func(req []byte) []byte {
			if string(req) == "hang" {
				f.hanging <- n
				<-f.unhung
			}
			return append([]byte{byte('0' + n), ' '}, req...)
		})
	}
}

// fakeProc is a fake child's process.
type fakeProc struct {
	pid    int
	stdin  *os.File      // the child's end, closed by Kill to end Serve
	exited chan struct{} // closed when the serving goroutine has returned
}

func (p *fakeProc) Kill() error { return p.stdin.Close() }
func (p *fakeProc) Wait() error { <-p.exited; return nil }
func (p *fakeProc) Pid() int    { return p.pid }

// fixed returns the limits of a pool of size children, no extra one, idle
// for idle at most, whose requests have no deadline but their context's.
func fixed(size int, idle time.Duration) limits {
	return limits{size: size, maxChildren: size, maxStuck: DefaultMaxStuck, busyAfter: time.Hour, requestTimeout: time.Hour, idleTime: idle}
}

// answeredBy returns which child answered an echo.
func answeredBy(t *testing.T, answer []byte, req string) int {
	t.Helper()
	n, rest, ok := bytes.Cut(answer, []byte(" "))
	if !ok || len(n) != 1 || string(rest) != req {
		t.Fatalf("answer %q to %q", answer, req)
	}
	return int(n[0] - '0')
}
