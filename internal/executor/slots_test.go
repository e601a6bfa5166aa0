package executor

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// TestAtMostParallelismWorkAtOnce starts many operations and checks that no
// more than Parallelism ran together and that every one ran.
func TestAtMostParallelismWorkAtOnce(t *testing.T) {
	var now, most, ran atomic.Int32
	var all sync.WaitGroup
	e := New(Config{Parallelism: 3, SlowAfter: time.Hour})
	for i := range 50 {
		all.Add(1)
		e.Start(fmt.Sprint(i), "1", func(context.Context) error {
			defer all.Done()
			n := now.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond)
			now.Add(-1)
			ran.Add(1)
			return nil
		})
	}
	all.Wait()
	if err := e.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	if most.Load() > 3 || most.Load() < 2 {
		t.Errorf("at most %d operations ran together; want 3 (2 at least)", most.Load())
	}
	if ran.Load() != 50 {
		t.Fatalf("%d of 50 operations ran", ran.Load())
	}
}

// TestOperationsRunInTheOrderTheyStarted: with one slot, queued operations
// run first come, first served.
func TestOperationsRunInTheOrderTheyStarted(t *testing.T) {
	e := New(Config{Parallelism: 1, SlowAfter: time.Hour})
	var mu sync.Mutex
	var order []int
	done := make(chan struct{}, 10)
	for i := range 10 {
		e.Start(fmt.Sprint(i), "1", func(context.Context) error {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			done <- struct{}{}
			return nil
		})
	}
	for range 10 {
		<-done
	}
	_ = e.Wait(waitCtx(t))
	for i, got := range order {
		if got != i {
			t.Fatalf("order = %v; want 0..9", order)
		}
	}
}

// TestASlowOperationGivesItsSlotBack: an operation stuck on storage holds
// its slot only SlowAfter; the next one then runs while it still hangs.
func TestASlowOperationGivesItsSlotBack(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(0, 0))
	e := New(Config{Parallelism: 1, SlowAfter: time.Second, Clock: clock})
	hung, ranNext := make(chan struct{}), make(chan struct{})
	started := make(chan struct{})
	e.Start("hung", "1", func(context.Context) error { close(started); <-hung; return nil })
	<-started
	e.Start("next", "1", func(context.Context) error { close(ranNext); return nil })
	select {
	case <-ranNext:
		t.Fatal("the second operation ran while the first held the only slot")
	case <-time.After(50 * time.Millisecond):
	}
	if e.Waiting() != 1 {
		t.Fatalf("Waiting = %d; want 1", e.Waiting())
	}
	clock.Step(time.Second)
	select {
	case <-ranNext:
	case <-time.After(5 * time.Second):
		t.Fatal("the slot of an operation slower than SlowAfter was not given to the next")
	}
	close(hung)
	_ = e.Wait(waitCtx(t))
}

// TestQueuedOperationsNeverStartOnceWaitBegins: at shutdown, what has not
// started yet is dropped, and may be started again later by a new agent.
func TestQueuedOperationsNeverStartOnceWaitBegins(t *testing.T) {
	e := New(Config{Parallelism: 1, SlowAfter: time.Hour})
	release, started := make(chan struct{}), make(chan struct{})
	var queuedRan atomic.Bool
	e.Start("first", "1", func(context.Context) error { close(started); <-release; return nil })
	<-started
	e.Start("queued", "1", func(context.Context) error { queuedRan.Store(true); return nil })
	go func() { time.Sleep(20 * time.Millisecond); close(release) }()
	if err := e.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	if queuedRan.Load() {
		t.Fatal("an operation queued before Wait ran after it began")
	}
	if e.Running("queued") || e.Waiting() != 0 {
		t.Fatalf("Running(queued) = %v, Waiting = %d after Wait; want false, 0", e.Running("queued"), e.Waiting())
	}
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
