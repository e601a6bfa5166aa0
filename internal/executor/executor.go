// Package executor runs volume operations: each on its own goroutine, never
// two at once for the same key (one volume of one pod), with per-key
// exponential backoff after failures so one failing volume never delays the
// others. At most Parallelism operations work at once, in the order they
// were started; one that waits on storage for longer than SlowAfter gives
// its slot to the next, so hung storage never holds the others up.
//
// The executor decides nothing about what to run; the reconciler does. It
// owns every goroutine it starts and Wait joins them.
package executor

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Defaults for Config.
const (
	DefaultInitialBackoff = 500 * time.Millisecond
	DefaultMaxBackoff     = 2*time.Minute + 2*time.Second
	DefaultTimeout        = 2 * time.Minute
	// DefaultParallelism was measured with the benchmark suite (see
	// BENCHMARKS.md, "Bounded concurrency").
	DefaultParallelism = 16
	DefaultSlowAfter   = time.Second
)

// Config configures an Executor. Zero values take the defaults.
type Config struct {
	// OnDone is called with an operation's key after the operation ends
	// and when its backoff expires, so the caller can look at it again
	// (it must not block).
	OnDone func(key string)
	// InitialBackoff is the wait after the first failure (500 ms); it
	// doubles on every further failure up to MaxBackoff (2 min 2 s).
	InitialBackoff, MaxBackoff time.Duration
	// Timeout bounds each operation (2 min). An operation that does not
	// return in time has its context cancelled.
	Timeout time.Duration
	// Parallelism bounds how many operations work at once (16); the
	// others wait their turn, oldest first.
	Parallelism int
	// SlowAfter is how long an operation may hold its slot (1 s): past it,
	// it is waiting on storage, not working, and the next one starts.
	SlowAfter time.Duration
	Clock     clock.WithDelayedExecution
}

// Op is an operation; ctx carries the operation's deadline.
type Op func(ctx context.Context) error

// Executor runs operations. Create with New.
type Executor struct {
	cfg Config
	// base is the parent of every operation's context; Wait cancels it
	// when its grace period ends, so abandoned operations stop early.
	base   context.Context
	cancel context.CancelFunc
	slots  *slots
	// draining is closed when Wait begins: operations still waiting for a
	// slot then never start.
	draining     chan struct{}
	drainingOnce sync.Once

	mu      sync.Mutex
	running map[string]bool    // guarded by mu
	failed  map[string]failure // guarded by mu
	wg      sync.WaitGroup
}

// failure remembers why a key is backing off.
type failure struct {
	generation string // what was attempted; a new generation is tried at once
	count      int
	until      time.Time
	wake       clock.Timer // calls OnDone when the backoff expires
}

// New returns an executor; it starts nothing.
func New(cfg Config) *Executor {
	if cfg.OnDone == nil {
		cfg.OnDone = func(string) {}
	}
	if cfg.InitialBackoff == 0 {
		cfg.InitialBackoff = DefaultInitialBackoff
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Parallelism <= 0 {
		cfg.Parallelism = DefaultParallelism
	}
	if cfg.SlowAfter == 0 {
		cfg.SlowAfter = DefaultSlowAfter
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	base, cancel := context.WithCancel(context.Background())
	return &Executor{cfg: cfg, base: base, cancel: cancel, slots: newSlots(cfg.Parallelism), draining: make(chan struct{}),
		running: map[string]bool{}, failed: map[string]failure{}}
}

// Start runs op for key unless an operation for key is running, or key is
// backing off from a failure of the same generation. It reports whether op
// was started. generation names what op attempts (e.g. a content version):
// when it differs from the one that failed, the backoff does not apply.
func (e *Executor) Start(key, generation string, op Op) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running[key] {
		return false
	}
	if f, ok := e.failed[key]; ok && f.generation == generation && e.cfg.Clock.Now().Before(f.until) {
		return false
	}
	e.running[key] = true
	e.wg.Add(1)
	go e.run(key, generation, e.slots.take(), op)
	return true
}

func (e *Executor) run(key, generation string, granted chan struct{}, op Op) {
	defer e.wg.Done()
	if !e.await(granted) {
		e.mu.Lock()
		delete(e.running, key) // never started: nothing to remember
		e.mu.Unlock()
		return
	}
	release := e.holdSlot()
	ctx, cancel := context.WithTimeout(e.base, e.cfg.Timeout)
	err := op(ctx)
	cancel()
	release()
	e.mu.Lock()
	delete(e.running, key)
	if err == nil {
		e.forgetLocked(key)
	} else {
		e.recordFailureLocked(key, generation)
	}
	e.mu.Unlock()
	e.cfg.OnDone(key)
}

// await waits for a slot and reports whether it got one; an operation
// granted one before Wait began runs, whenever its goroutine gets there.
func (e *Executor) await(granted chan struct{}) bool {
	select {
	case <-granted:
		return true
	default:
	}
	select {
	case <-granted:
		return true
	case <-e.draining:
		e.slots.abandon(granted)
		return false
	}
}

// holdSlot gives the slot back after SlowAfter, or when the returned
// function is called, whichever comes first.
func (e *Executor) holdSlot() (release func()) {
	var once sync.Once
	give := func() { once.Do(e.slots.give) }
	slow := e.cfg.Clock.AfterFunc(e.cfg.SlowAfter, give)
	return func() {
		slow.Stop()
		give()
	}
}

// Waiting returns how many started operations wait for a slot.
func (e *Executor) Waiting() int { return e.slots.waiting() }

// recordFailureLocked starts or extends key's backoff and arranges a wake-up
// for when it expires.
func (e *Executor) recordFailureLocked(key, generation string) {
	f := e.failed[key]
	if f.generation != generation {
		f = failure{generation: generation, wake: f.wake}
	}
	if f.wake != nil {
		f.wake.Stop()
	}
	f.count++
	delay := e.backoff(f.count)
	f.until = e.cfg.Clock.Now().Add(delay)
	f.wake = e.cfg.Clock.AfterFunc(delay, func() { e.cfg.OnDone(key) })
	e.failed[key] = f
}

// forgetLocked drops key's backoff.
func (e *Executor) forgetLocked(key string) {
	if f, ok := e.failed[key]; ok && f.wake != nil {
		f.wake.Stop()
	}
	delete(e.failed, key)
}

// Forget drops key's backoff, e.g. when its volume is no longer wanted.
func (e *Executor) Forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.forgetLocked(key)
}

// backoff returns the wait after n consecutive failures, with up to 10% jitter.
func (e *Executor) backoff(n int) time.Duration {
	d := e.cfg.InitialBackoff
	for i := 1; i < n && d < e.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, e.cfg.MaxBackoff)
	return d + time.Duration(rand.Int64N(int64(d)/10+1)) //nolint:gosec // G404: retry jitter
}

// Running reports whether an operation for key is in flight.
func (e *Executor) Running(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running[key]
}

// Wait waits for every running operation to end, or for ctx to end, and
// stops pending backoff wake-ups. Operations still waiting for a slot are
// dropped without running. It returns ctx.Err() if operations were
// still running when ctx ended; their contexts are then cancelled.
func (e *Executor) Wait(ctx context.Context) error {
	e.drainingOnce.Do(func() { close(e.draining) })
	done := make(chan struct{})
	go func() {
		e.wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		e.cancel()
	}
	e.mu.Lock()
	for key := range e.failed {
		e.forgetLocked(key)
	}
	e.mu.Unlock()
	return err
}

// Retain drops the backoff of every key for which keep returns false.
func (e *Executor) Retain(keep func(key string) bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for key := range e.failed {
		if !keep(key) {
			e.forgetLocked(key)
		}
	}
}
