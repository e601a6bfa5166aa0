package executor

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errBoom = errors.New("boom")

// harness runs ops synchronously enough to observe: done receives after each op.
type harness struct {
	e     *Executor
	clock *clocktesting.FakeClock
	done  chan struct{}
}

func newHarness(t *testing.T) *harness {
	h := &harness{clock: clocktesting.NewFakeClock(time.Unix(0, 0)), done: make(chan struct{}, 100)}
	h.e = New(Config{Clock: h.clock, OnDone: func(string) { h.done <- struct{}{} }})
	t.Cleanup(func() { _ = h.e.Wait(context.Background()) })
	return h
}

func (h *harness) wait(t *testing.T) {
	t.Helper()
	select {
	case <-h.done:
	case <-time.After(5 * time.Second):
		t.Fatal("operation did not finish")
	}
}

func (h *harness) startOK(t *testing.T, key, gen string, err error) {
	t.Helper()
	if !h.e.Start(key, gen, func(context.Context) error { return err }) {
		t.Fatalf("Start(%q, %q) refused", key, gen)
	}
	h.wait(t)
}

func TestStartRefusesASecondOperationForTheSameKey(t *testing.T) {
	h := newHarness(t)
	release := make(chan struct{})
	if !h.e.Start("k", "1", func(context.Context) error { <-release; return nil }) {
		t.Fatal("first Start refused")
	}
	if h.e.Start("k", "1", func(context.Context) error { return nil }) {
		t.Fatal("second Start for a running key accepted")
	}
	if !h.e.Start("other", "1", func(context.Context) error { return nil }) {
		t.Fatal("a running key blocked another key")
	}
	h.wait(t)
	close(release)
	h.wait(t)
	if h.e.Running("k") {
		t.Fatal("key still running after the op returned")
	}
}

func TestFailureBacksOffExponentially(t *testing.T) {
	h := newHarness(t)
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second}
	for i, d := range want {
		h.startOK(t, "k", "1", errBoom)
		if h.e.Start("k", "1", func(context.Context) error { return nil }) {
			t.Fatalf("failure %d: Start accepted during backoff", i+1)
		}
		h.clock.Step(d - time.Millisecond)
		if h.e.Start("k", "1", func(context.Context) error { return nil }) {
			t.Fatalf("failure %d: Start accepted %v after failure, before the %v backoff", i+1, d-time.Millisecond, d)
		}
		h.clock.Step(d/10 + time.Millisecond) // past the jitter too
		h.wait(t)                             // the backoff expiry wakes the caller
	}
}

func TestBackoffIsCapped(t *testing.T) {
	e := New(Config{})
	for n := 1; n < 40; n++ {
		if d := e.backoff(n); d > DefaultMaxBackoff+DefaultMaxBackoff/10 {
			t.Fatalf("backoff(%d) = %v, above the cap", n, d)
		}
	}
	if d := e.backoff(30); d < DefaultMaxBackoff {
		t.Fatalf("backoff(30) = %v, want at least %v", d, DefaultMaxBackoff)
	}
}

func TestNewGenerationSkipsBackoff(t *testing.T) {
	h := newHarness(t)
	h.startOK(t, "k", "1", errBoom)
	h.startOK(t, "k", "2", nil)
}

func TestSuccessClearsBackoff(t *testing.T) {
	h := newHarness(t)
	h.startOK(t, "k", "1", errBoom)
	h.clock.Step(time.Second)
	h.wait(t)
	h.startOK(t, "k", "1", nil)
	h.startOK(t, "k", "1", errBoom) // a fresh failure after success starts at 500ms again
	h.clock.Step(551 * time.Millisecond)
	h.wait(t)
	h.startOK(t, "k", "1", nil)
}

func TestRetainForgetsBackoff(t *testing.T) {
	h := newHarness(t)
	h.startOK(t, "k", "1", errBoom)
	h.e.Retain(func(string) bool { return false })
	h.startOK(t, "k", "1", nil)
}

func TestOperationGetsADeadline(t *testing.T) {
	e := New(Config{Timeout: 10 * time.Millisecond})
	var sawDeadline atomic.Bool
	e.Start("k", "1", func(ctx context.Context) error {
		<-ctx.Done()
		sawDeadline.Store(errors.Is(ctx.Err(), context.DeadlineExceeded))
		return ctx.Err()
	})
	if err := e.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !sawDeadline.Load() {
		t.Fatal("operation context did not hit its deadline")
	}
}

func TestWaitGivesUpWhenItsContextEnds(t *testing.T) {
	e := New(Config{})
	release := make(chan struct{})
	e.Start("k", "1", func(context.Context) error { <-release; return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := e.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want DeadlineExceeded", err)
	}
	close(release)
	if err := e.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestWaitCancelsAbandonedOperations(t *testing.T) {
	e := New(Config{})
	cancelled := make(chan error, 1)
	e.Start("k", "1", func(ctx context.Context) error {
		<-ctx.Done()
		cancelled <- ctx.Err()
		return ctx.Err()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_ = e.Wait(ctx)
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("operation context ended with %v, want Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an abandoned operation's context was not cancelled")
	}
	_ = e.Wait(context.Background())
}

// OnDone names the key whose operation ended, and the key whose backoff
// expired, so that the caller looks at that one again.
func TestOnDoneNamesTheKey(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	keys := make(chan string, 10)
	e := New(Config{Clock: clk, OnDone: func(key string) { keys <- key }})
	t.Cleanup(func() { _ = e.Wait(context.Background()) })
	next := func() string {
		t.Helper()
		select {
		case k := <-keys:
			return k
		case <-time.After(5 * time.Second):
			t.Fatal("OnDone was not called")
			return ""
		}
	}
	e.Start("pod/ok", "1", func(context.Context) error { return nil })
	if k := next(); k != "pod/ok" {
		t.Fatalf("OnDone(%q) after pod/ok ended", k)
	}
	e.Start("pod/fails", "1", func(context.Context) error { return errBoom })
	if k := next(); k != "pod/fails" {
		t.Fatalf("OnDone(%q) after pod/fails ended", k)
	}
	clk.Step(2 * DefaultInitialBackoff) // past the backoff and its jitter
	if k := next(); k != "pod/fails" {
		t.Fatalf("OnDone(%q) when pod/fails's backoff expired", k)
	}
}
