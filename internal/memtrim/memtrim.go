// Package memtrim gives the Go heap's free pages back to the kernel once
// the agent has been quiet for a while after work. A burst of set-ups or
// teardowns grows the heap; Go's background scavenger returns the pages
// above its goal slowly, so an agent that goes idle after a burst would
// keep them resident for minutes. One forced collection and release when
// the work has settled costs a few milliseconds of CPU once per busy
// period, and nothing while the agent stays idle: Touch arms a single
// timer, and nothing ticks without it.
package memtrim

import (
	"runtime/debug"
	"sync"
	"time"
)

// DefaultQuiet is how long nothing must change before the heap is trimmed.
const DefaultQuiet = time.Second

// Trimmer trims the heap after Quiet without a Touch. Create with New.
type Trimmer struct {
	quiet time.Duration
	now   func() time.Time
	after func(time.Duration, func())
	free  func()

	mu    sync.Mutex
	last  time.Time // the latest Touch; guarded by mu
	armed bool      // a timer will call fire; guarded by mu
	trims int       // guarded by mu
}

// Config configures a Trimmer; zero values take the defaults.
type Config struct {
	Quiet time.Duration // DefaultQuiet
	// Now and After are time.Now and a time.AfterFunc; tests replace them.
	Now   func() time.Time
	After func(time.Duration, func())
	// Free releases memory (debug.FreeOSMemory); tests replace it.
	Free func()
}

// New returns a Trimmer that does nothing until the first Touch.
func New(cfg Config) *Trimmer {
	if cfg.Quiet <= 0 {
		cfg.Quiet = DefaultQuiet
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.After == nil {
		cfg.After = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	if cfg.Free == nil {
		cfg.Free = debug.FreeOSMemory
	}
	return &Trimmer{quiet: cfg.Quiet, now: cfg.Now, after: cfg.After, free: cfg.Free}
}

// Touch records work: the trim waits until Quiet has passed since the
// latest Touch. It never blocks on the trim itself, and is cheap enough to
// call on every change (a clock read; a timer is armed only when none is).
func (t *Trimmer) Touch() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last = t.now()
	if !t.armed {
		t.armed = true
		t.after(t.quiet, t.fire)
	}
}

// fire trims once the latest Touch is Quiet old, or re-arms for the rest.
func (t *Trimmer) fire() {
	t.mu.Lock()
	if wait := t.quiet - t.now().Sub(t.last); wait > 0 {
		t.after(wait, t.fire)
		t.mu.Unlock()
		return
	}
	t.armed = false
	t.trims++
	t.mu.Unlock()
	t.free()
}

// Trims returns how many trims have run.
func (t *Trimmer) Trims() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.trims
}
