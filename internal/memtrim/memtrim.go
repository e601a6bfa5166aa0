// Package memtrim gives the Go heap's free pages back to the kernel once
// the agent has been quiet for a while after work. A burst of set-ups or
// teardowns grows the heap; Go's background scavenger returns the pages
// above its goal slowly, so an agent that goes idle after a burst would
// keep them resident for minutes. One forced collection and release when
// the work has settled costs a few milliseconds of CPU once per busy
// period, and nothing while the agent stays idle: Touch arms a single
// timer, and nothing ticks without it.
//
// While busy (from the first Touch after quiet until the trim) the garbage
// collector runs less often: GOGC goes from 100 to BusyGCPercent, so a
// burst of set-ups does about a quarter of the collections, and a soft
// memory limit of BusyMemoryLimit keeps the Go heap from growing past what
// GOGC 100 would allow for any heap below half that limit. The trim puts
// both back, then collects: the memory at rest does not change. When the
// operator set GOGC or GOMEMLIMIT in the environment, the collector is left
// as they set it, busy or not.
package memtrim

import (
	"cmp"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// DefaultQuiet is how long nothing must change before the heap is trimmed.
const DefaultQuiet = time.Second

// Defaults while busy. With GOGC 400 the heap may grow to five times what
// is live before a collection, instead of twice; the live heap of a burst
// of 110 pods is a few MiB. The limit applies to all the memory the Go
// runtime holds (not the tmpfs pages of volumes, charged to the agent's
// cgroup too): 64 MiB is a quarter of the DaemonSet's 256 MiB limit, and
// binds before GOGC 400 only once the heap passes about 12 MiB live. It is
// raised to twice the live heap when that is more, so that it never binds
// before GOGC 100 would: on a node whose live heap passes 32 MiB (many
// large ConfigMaps and Secrets), a 64 MiB limit would make the collector
// run back to back for the whole busy period.
const (
	DefaultBusyGCPercent   = 400
	DefaultBusyMemoryLimit = 64 << 20
)

// Trimmer trims the heap after Quiet without a Touch. Create with New.
type Trimmer struct {
	quiet time.Duration
	now   func() time.Time
	after func(time.Duration, func())
	free  func()
	busy  busyGC

	mu    sync.Mutex
	last  time.Time // the latest Touch; guarded by mu
	armed bool      // a timer will call fire; guarded by mu
	trims int       // guarded by mu
	// restore puts the collector's settings back at the trim; nil when
	// they were not changed. Guarded by mu.
	restore func()
}

// busyGC is how the collector runs while busy, and how its settings are
// changed (debug's, or a test's).
type busyGC struct {
	percent        int
	limit          int64
	setGCPercent   func(int) int
	setMemoryLimit func(int64) int64
	liveHeap       func() uint64
}

// Config configures a Trimmer; zero values take the defaults.
type Config struct {
	Quiet time.Duration // DefaultQuiet
	// Now and After are time.Now and a time.AfterFunc; tests replace them.
	Now   func() time.Time
	After func(time.Duration, func())
	// Free releases memory (debug.FreeOSMemory); tests replace it.
	Free func()
	// BusyGCPercent and BusyMemoryLimit are GOGC and the soft memory
	// limit while busy (DefaultBusyGCPercent, DefaultBusyMemoryLimit); a
	// negative BusyGCPercent leaves the collector as it is, and so does
	// GOGC or GOMEMLIMIT set in the environment.
	BusyGCPercent   int
	BusyMemoryLimit int64
	// SetGCPercent and SetMemoryLimit are debug's; tests replace them.
	SetGCPercent   func(int) int
	SetMemoryLimit func(int64) int64
	// LiveHeap returns the bytes the last collection found live
	// (runtime/metrics' /gc/heap/live:bytes); tests replace it.
	LiveHeap func() uint64
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
	if cfg.SetGCPercent == nil {
		cfg.SetGCPercent = debug.SetGCPercent
	}
	if cfg.SetMemoryLimit == nil {
		cfg.SetMemoryLimit = debug.SetMemoryLimit
	}
	if operatorSetGC() {
		cfg.BusyGCPercent = -1
	}
	if cfg.LiveHeap == nil {
		cfg.LiveHeap = liveHeap
	}
	busy := busyGC{percent: cmp.Or(cfg.BusyGCPercent, DefaultBusyGCPercent), limit: cmp.Or(cfg.BusyMemoryLimit, DefaultBusyMemoryLimit),
		setGCPercent: cfg.SetGCPercent, setMemoryLimit: cfg.SetMemoryLimit, liveHeap: cfg.LiveHeap}
	return &Trimmer{quiet: cfg.Quiet, now: cfg.Now, after: cfg.After, free: cfg.Free, busy: busy}
}

// liveHeap reads the live heap the last collection found.
func liveHeap() uint64 {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// operatorSetGC reports whether the environment sets GOGC or GOMEMLIMIT:
// the operator chose how the collector runs, and the agent keeps to it.
func operatorSetGC() bool {
	return os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != ""
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
		t.restore = t.busy.start()
		t.after(t.quiet, t.fire)
	}
}

// start makes the collector run as while busy, and returns what puts it
// back, or nil when it left it as it was: busy.percent negative, or a GOGC
// already as high or off.
func (b busyGC) start() func() {
	if b.percent < 0 {
		return nil
	}
	percent := b.setGCPercent(b.percent)
	if percent < 0 || percent >= b.percent {
		b.setGCPercent(percent)
		return nil
	}
	limit := b.setMemoryLimit(-1) // reads it
	if limit == math.MaxInt64 {   // none set
		busyLimit := b.limit
		if live := b.liveHeap(); live < math.MaxInt64/2 && int64(2*live) > busyLimit {
			busyLimit = int64(2 * live)
		}
		b.setMemoryLimit(busyLimit)
	}
	return func() {
		b.setMemoryLimit(limit)
		b.setGCPercent(percent)
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
	restore := t.restore
	t.restore = nil
	t.mu.Unlock()
	if restore != nil {
		restore()
	}
	t.free()
}

// Trims returns how many trims have run.
func (t *Trimmer) Trims() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.trims
}
