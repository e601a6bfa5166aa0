package procpool

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"
)

// liveness bounds the waits for something that must happen: never a
// measure of speed, only a guard against a test that would hang.
const liveness = 10 * time.Second

// do makes a request that must be answered.
func do(t *testing.T, p *Pool, req string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), liveness)
	defer cancel()
	released := false
	answer, err := p.Do(ctx, []byte(req), func() { released = true })
	if err != nil {
		t.Fatalf("Do(%q): %v", req, err)
	}
	if !released {
		t.Fatalf("Do(%q) returned an answer before calling release", req)
	}
	return answer
}

// hung is a request that hangs its child, until cancel.
type hung struct {
	cancel   context.CancelFunc
	err      chan error    // Do's error
	released chan struct{} // closed by release
	pid      int           // the child that hangs
}

func startHung(t *testing.T, p *Pool, f *fakeChildren) *hung {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &hung{cancel: cancel, err: make(chan error, 1), released: make(chan struct{})}
	t.Cleanup(cancel)
	go func() {
		_, err := p.Do(ctx, []byte("hang"), func() { close(h.released) })
		h.err <- err
	}()
	select {
	case h.pid = <-f.hanging:
	case <-time.After(liveness):
		t.Fatal("the request never reached a child")
	}
	return h
}

// giveUp cancels the hung request and returns its error.
func (h *hung) giveUp(t *testing.T) error {
	t.Helper()
	h.cancel()
	select {
	case err := <-h.err:
		return err
	case <-time.After(liveness):
		t.Fatal("Do did not return once its context was cancelled")
		return nil
	}
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(liveness):
		t.Fatalf("%s never happened", what)
	}
}

// TestHungChildBlocksNoOther: while one child hangs, the other answers;
// the hung request returns when its context ends, and is released only
// once its child is gone.
func TestHungChildBlocksNoOther(t *testing.T) {
	f := newFakeChildren(t)
	p := f.pool(2)
	h := startHung(t, p, f)
	for range 3 {
		if n := answeredBy(t, do(t, p, "x"), "x"); n == h.pid {
			t.Fatalf("the hung child %d answered", n)
		}
	}
	if err := h.giveUp(t); !errors.Is(err, context.Canceled) || !errors.Is(err, errNoAnswer) {
		t.Fatalf("hung request: %v, want no answer, cancelled", err)
	}
	select {
	case <-h.released:
		t.Fatal("the hung request was released while its child still hangs")
	default:
	}
	if st := p.Stats(); st != (Stats{Abandoned: 1, Unreaped: 1, MaxStuck: DefaultMaxStuck}) {
		t.Fatalf("stats while the abandoned child hangs: %+v, want 1 abandoned, 1 unreaped", st)
	}
	do(t, p, "y")
	f.unhang()
	wait(t, h.released, "the release of the hung request once its child went")
	if st := p.Stats(); st != (Stats{Abandoned: 1, MaxStuck: DefaultMaxStuck}) {
		t.Fatalf("stats once the abandoned child went: %+v, want 1 abandoned, 0 unreaped", st)
	}
}

// TestHungChildReplaced: a pool of one child gives the slot of an
// abandoned child to a new one.
func TestHungChildReplaced(t *testing.T) {
	f := newFakeChildren(t)
	p := f.pool(1)
	first := answeredBy(t, do(t, p, "a"), "a")
	if again := answeredBy(t, do(t, p, "b"), "b"); again != first {
		t.Fatalf("child %d answered, then child %d: an idle child was not reused", first, again)
	}
	h := startHung(t, p, f)
	if err := h.giveUp(t); err == nil {
		t.Fatal("a hung request succeeded")
	}
	if n := answeredBy(t, do(t, p, "c"), "c"); n == h.pid {
		t.Fatalf("the abandoned child %d answered", n)
	}
	if n := f.started.Load(); n != 2 {
		t.Fatalf("%d children started, want 2", n)
	}
}

// TestWaitForAChild: with every child busy, a request waits, and gives up
// when its own context ends.
func TestWaitForAChild(t *testing.T) {
	f := newFakeChildren(t)
	p := f.pool(1)
	h := startHung(t, p, f)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	released := false
	if _, err := p.Do(ctx, []byte("x"), func() { released = true }); !errors.Is(err, context.Canceled) || !released {
		t.Fatalf("Do with every child busy: %v (released %v), want cancelled and released", err, released)
	}
	if n := f.started.Load(); n != 1 {
		t.Fatalf("%d children started, want 1", n)
	}
	if err := h.giveUp(t); err == nil {
		t.Fatal("a hung request succeeded")
	}
}

// TestCloseWithHungChild: Close (by Run) returns with every child hung,
// and fails the requests waiting for a child and every later one; the
// hung children are reaped once they let go.
func TestCloseWithHungChild(t *testing.T) {
	f := newFakeChildren(t)
	p := f.pool(2)
	do(t, p, "x")
	hangs := []*hung{startHung(t, p, f), startHung(t, p, f)}
	waiting := make(chan error, 1)
	go func() { // both children are busy: this one waits
		_, err := p.Do(context.Background(), []byte("x"), func() {})
		waiting <- err
	}()

	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(liveness):
		t.Fatal("Run did not return after its context ended, with a child hung")
	}
	select {
	case err := <-waiting:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("waiting request: %v, want ErrClosed", err)
		}
	case <-time.After(liveness):
		t.Fatal("a request waiting for a child still waits after Close")
	}
	if _, err := p.Do(context.Background(), []byte("x"), func() {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close: %v, want ErrClosed", err)
	}
	for _, h := range hangs {
		if err := h.giveUp(t); err == nil {
			t.Fatal("a hung request succeeded")
		}
	}
	f.unhang()
	p.reaping.Wait() // every child, hung or idle, is stopped and reaped
}

// TestChildDiesWhileAnswering: a request whose child dies fails; the
// next gets a new child.
func TestChildDiesWhileAnswering(t *testing.T) {
	f := newFakeChildren(t, func(in, _ *os.File) {
		buf := make([]byte, 1)
		_, _ = in.Read(buf) // reads the start of a request, then dies
	})
	p := f.pool(1)
	released := false
	if _, err := p.Do(context.Background(), []byte("x"), func() { released = true }); err == nil {
		t.Fatal("a child that died answered")
	}
	f.unhang()
	p.reaping.Wait()
	if !released {
		t.Fatal("the request of a dead child was never released")
	}
	if n := answeredBy(t, do(t, p, "y"), "y"); n != 2 {
		t.Fatalf("child %d answered, want the new child 2", n)
	}
}

// TestGarbageAnswer: an answer that is not a frame of the request just
// sent gets its child abandoned; the next request gets a new child.
func TestGarbageAnswer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer []byte
	}{
		{"too long", appendFrame(nil, 1, make([]byte, MaxFrame+1))},
		{"wrong number", appendFrame(nil, 7, []byte("ok"))},
		{"cut short", appendFrame(nil, 1, []byte("ok"))[:9]},
		{"noise", []byte("\xff\xff\xff\xffgarbage")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeChildren(t, func(in, out *os.File) {
				_, _ = in.Read(make([]byte, 64))
				_, _ = out.Write(tc.answer)
			})
			p := f.pool(1)
			if a, err := p.Do(context.Background(), []byte("x"), func() {}); err == nil {
				t.Fatalf("garbage answered %q", a)
			}
			if n := answeredBy(t, do(t, p, "y"), "y"); n != 2 {
				t.Fatalf("child %d answered, want the new child 2", n)
			}
		})
	}
}

// TestRequestTooLong: a request longer than MaxFrame is refused before
// it is sent; its child stays usable.
func TestRequestTooLong(t *testing.T) {
	f := newFakeChildren(t)
	p := f.pool(1)
	if _, err := p.Do(context.Background(), make([]byte, MaxFrame+1), func() {}); err == nil {
		t.Fatal("a request longer than MaxFrame was sent")
	}
	do(t, p, "x")
	if n := f.started.Load(); n != 1 {
		t.Fatalf("%d children started, want 1", n)
	}
}

// TestIdleChildRetires: a child idle for IdleTimeout is stopped; the next
// request starts another.
func TestIdleChildRetires(t *testing.T) {
	f := newFakeChildren(t)
	p := newPool(fixed(1, time.Millisecond), zap.NewNop(), f.start)
	t.Cleanup(p.Close)
	if n := answeredBy(t, do(t, p, "x"), "x"); n != 1 {
		t.Fatalf("child %d answered, want 1", n)
	}
	wait(t, f.proc(1).exited, "the stop of the idle child")
	if n := answeredBy(t, do(t, p, "y"), "y"); n != 2 {
		t.Fatalf("child %d answered, want the new child 2", n)
	}
	p.Close()
	p.reaping.Wait()
}

// TestNewRefusesBadConfig: Command is required, Size and IdleTimeout are
// bounded.
func TestNewRefusesBadConfig(t *testing.T) {
	for _, cfg := range []Config{{}, {Command: childCommand, Size: -1}, {Command: childCommand, Size: MaxSize + 1}, {Command: childCommand, IdleTimeout: -time.Second}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted it", cfg)
		}
	}
}

// TestCancelledRequestKeepsChild: a request whose context ended before it
// was sent fails, and its idle child stays.
func TestCancelledRequestKeepsChild(t *testing.T) {
	f := newFakeChildren(t)
	p := f.pool(1)
	do(t, p, "x")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 10 {
		if _, err := p.Do(ctx, []byte("y"), func() {}); !errors.Is(err, context.Canceled) {
			t.Fatalf("Do with a cancelled context: %v, want cancelled", err)
		}
	}
	if n := answeredBy(t, do(t, p, "z"), "z"); n != 1 || f.started.Load() != 1 {
		t.Fatalf("child %d answered after %d starts, want child 1 and no other start", n, f.started.Load())
	}
}
