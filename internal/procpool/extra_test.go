package procpool

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
)

// burst returns a pool of f's children: size kept, up to most at once,
// an extra one after busy, each request abandoned after timeout.
func (f *fakeChildren) burst(size, most int, busy, timeout time.Duration) *Pool {
	p := newPool(limits{size: size, maxChildren: most, maxStuck: DefaultMaxStuck, busyAfter: busy, requestTimeout: timeout, idleTime: time.Hour}, zap.NewNop(), f.start)
	f.t.Cleanup(p.Close)
	return p
}

// TestRequestTimeout: a child that does not answer within the pool's
// RequestTimeout is abandoned, whatever the request's context, and the
// error says so.
func TestRequestTimeout(t *testing.T) {
	f := newFakeChildren(t)
	p := f.burst(1, 1, time.Hour, 50*time.Millisecond)
	released := make(chan struct{})
	_, err := p.Do(context.Background(), []byte("hang"), func() { close(released) })
	if !errors.Is(err, ErrNoAnswer) {
		t.Fatalf("Do on a hung child: %v, want ErrNoAnswer", err)
	}
	if st := p.Stats(); st.Abandoned != 1 || st.Unreaped != 1 {
		t.Fatalf("stats: %+v, want 1 abandoned, 1 unreaped", st)
	}
	if n := answeredBy(t, do(t, p, "x"), "x"); n != 2 {
		t.Fatalf("child %d answered, want the replacement 2", n)
	}
	f.unhang()
	wait(t, released, "the release once the hung child went")
}

// TestHealthyServedPastHung: with every kept child hung, a request gets
// an extra child once they have been busy for BusyAfter, up to
// MaxChildren; past that it waits for a turn.
func TestHealthyServedPastHung(t *testing.T) {
	f := newFakeChildren(t)
	const busy = 100 * time.Millisecond
	p := f.burst(2, 4, busy, time.Hour)
	var hangs []*hung
	for range 4 { // two kept children, then two extra ones
		hangs = append(hangs, startHung(t, p, f))
	}
	if n := f.started.Load(); n != 4 {
		t.Fatalf("%d children started for 4 hung requests, want 4", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*busy)
	defer cancel()
	if _, err := p.Do(ctx, []byte("x"), func() {}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do with MaxChildren hung: %v, want it to wait until its deadline", err)
	}
	if n := f.started.Load(); n != 4 {
		t.Fatalf("%d children started, want no more than MaxChildren 4", n)
	}
	hangs[0].giveUp(t)
	start := time.Now()
	if n := answeredBy(t, do(t, p, "y"), "y"); n != 5 {
		t.Fatalf("child %d answered, want a new child 5", n)
	}
	if took := time.Since(start); took > busy+liveness/2 {
		t.Fatalf("a request behind hung ones waited %v", took)
	}
	for _, h := range hangs[1:] {
		h.giveUp(t)
	}
}

// TestNoExtraForFastRequests: requests answered at once never start more
// than the kept children.
func TestNoExtraForFastRequests(t *testing.T) {
	f := newFakeChildren(t)
	p := f.burst(1, 8, time.Hour, time.Hour)
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 50 {
				do(t, p, "x")
			}
		}()
	}
	for range 4 {
		<-done
	}
	if n := f.started.Load(); n != 1 {
		t.Fatalf("%d children started for fast requests, want 1", n)
	}
}

// TestMaxStuck: while MaxStuck abandoned children are stuck, requests are
// refused at once; once they go, requests are answered again.
func TestMaxStuck(t *testing.T) {
	f := newFakeChildren(t)
	p := newPool(limits{size: 1, maxChildren: 1, maxStuck: 2, busyAfter: time.Hour, requestTimeout: 20 * time.Millisecond, idleTime: time.Hour}, zap.NewNop(), f.start)
	t.Cleanup(p.Close)
	for range 2 {
		if _, err := p.Do(context.Background(), []byte("hang"), func() {}); !errors.Is(err, ErrNoAnswer) {
			t.Fatalf("Do on a hung child: %v", err)
		}
	}
	if _, err := p.Do(context.Background(), []byte("x"), func() {}); !errors.Is(err, ErrTooManyStuck) {
		t.Fatalf("Do with 2 stuck: %v, want ErrTooManyStuck", err)
	}
	if st := p.Stats(); st.Refused != 1 || st.Unreaped != 2 || st.MaxStuck != 2 {
		t.Fatalf("stats %+v, want 1 refused, 2 unreaped of 2", st)
	}
	f.unhang()
	p.reaping.Wait()
	do(t, p, "y")
}
