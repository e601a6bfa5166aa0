package usage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// A pass is one batch of work on volumes' storage: the measurements due
// at one time, or one search for nested subvolumes. One worker goroutine
// does its jobs one after the other, calling storage directly; the
// goroutine that runs the pass (Run's) watches the call in progress with
// one timer and abandons it past its bound: the call's volume is reported
// as not measured, stays busy until the call returns (and is not asked
// again until then), and a new worker goes on with the pass's other
// jobs. So a pass costs two goroutine hand-offs whatever its size, where
// a goroutine per call would cost two per call, and a hung volume delays
// the others by its bound only (CallTimeout, or StallTimeout without
// progress for a walk), as it did when each call had its own goroutine.
type pass struct {
	u    *Usage
	ctx  context.Context
	jobs []job
	// finished is closed by the worker that finds no job left.
	finished chan struct{}

	mu      sync.Mutex
	next    int               // guarded by mu: the index of the next job to start
	running *call             // guarded by mu: the call in progress; nil between calls
	statfs  map[uint64]fsSize // guarded by mu: file systems read in this pass, by mount ID (sharedStatfs)
	current *worker           // guarded by mu: the worker not abandoned
	pace    *pacer            // guarded by mu: the walks' pace, from the first walk
}

// job is one volume's work in a pass.
type job struct {
	s *slot
	// run does the work on the worker w, calling storage through callOn.
	run func(w *worker)
	// abandoned, when set, is told why a call of the job was abandoned;
	// it runs on the watching goroutine.
	abandoned func(err error)
}

// worker is one goroutine doing a pass's jobs.
type worker struct {
	p *pass
	// abandoned: a call of this worker passed its bound. It makes no
	// other call and records nothing, and ends when that call returns.
	abandoned bool // guarded by p.mu
	job       *job // the job it is doing; only the worker touches it
}

// call is a call on a volume's storage in progress.
type call struct {
	w   *worker
	job *job
	// bound is how long the call may take; with progress, how long it
	// may go without progress.
	bound    time.Duration
	progress *atomic.Uint64
	seen     uint64    // progress at the last check
	deadline time.Time // abandoned when not returned by then
	cancel   context.CancelCauseFunc
}

// errAbandoned is what a call of an abandoned worker returns: the worker
// is to stop. No one sees it: an abandoned worker records nothing (the
// watchdog reported why).
var errAbandoned error = abandonedError{}

type abandonedError struct{}

func (abandonedError) Error() string { return "call abandoned" }

// errStalled says a walk made no progress for StallTimeout.
var errStalled = errors.New("the file system did not answer: walk abandoned")

// runPass does jobs on one worker goroutine and watches it until every
// job is done or ctx ends.
func (u *Usage) runPass(ctx context.Context, jobs []job) {
	if len(jobs) == 0 {
		return
	}
	p := &pass{u: u, ctx: ctx, jobs: jobs, finished: make(chan struct{}), statfs: map[uint64]fsSize{}}
	p.mu.Lock()
	p.startLocked()
	p.mu.Unlock()
	p.watch()
}

// pacer is the pace of the pass's walks, started at its first walk.
func (p *pass) pacer() *pacer {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pace == nil {
		u := p.u
		p.pace = &pacer{rate: float64(u.cfg.EntriesPerSecond), start: u.cfg.now(), slack: walkSlack, now: u.cfg.now, sleep: u.cfg.sleep}
	}
	return p.pace
}

// startLocked starts a worker for the pass's remaining jobs. p.mu must
// be held.
func (p *pass) startLocked() {
	w := &worker{p: p}
	p.current = w
	p.u.workers.Add(1)
	go p.work(w)
}

// work does jobs until none is left or w is abandoned.
func (p *pass) work(w *worker) {
	for {
		p.mu.Lock()
		if w.abandoned {
			p.mu.Unlock()
			return
		}
		if p.next == len(p.jobs) {
			p.mu.Unlock()
			close(p.finished)
			return
		}
		w.job = &p.jobs[p.next]
		p.next++
		p.mu.Unlock()
		w.job.run(w)
	}
}

// watch waits for the pass to finish, abandoning a call past its bound.
// The timer fires only while a pass runs longer than the shortest bound:
// a pass of quick calls wakes nothing.
func (p *pass) watch() {
	timer := time.NewTimer(p.u.minBound())
	defer timer.Stop()
	for {
		select {
		case <-p.finished:
			return
		case <-p.ctx.Done():
			p.abandonCurrent()
			return
		case <-timer.C:
		}
		timer.Reset(p.check(time.Now()))
	}
}

// minBound is the shortest bound of a call: the longest the watchdog can
// wait without missing a call's deadline.
func (u *Usage) minBound() time.Duration {
	return min(u.cfg.CallTimeout, u.cfg.StallTimeout)
}

// check abandons the call in progress if it passed its bound, and says
// how long until the next check.
func (p *pass) check(now time.Time) time.Duration {
	p.mu.Lock()
	c := p.running
	if c == nil {
		p.mu.Unlock()
		return p.u.minBound() // a call starting now has at least that long
	}
	if c.progress != nil {
		if n := c.progress.Load(); n != c.seen {
			c.seen, c.deadline = n, now.Add(c.bound)
		}
	}
	if now.Before(c.deadline) {
		p.mu.Unlock()
		return c.deadline.Sub(now)
	}
	c.w.abandoned = true
	p.running = nil
	p.startLocked()
	p.mu.Unlock()
	err := fmt.Errorf("gave up waiting for storage: %w", context.DeadlineExceeded)
	if c.progress != nil {
		err = fmt.Errorf("%w after %v without progress", errStalled, c.bound)
	}
	c.cancel(err)
	if c.job.abandoned != nil {
		c.job.abandoned(err)
	}
	return p.u.minBound()
}

// abandonCurrent abandons the worker at work when the pass ends early
// (ctx ended): it stops after its call, recording nothing.
func (p *pass) abandonCurrent() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.current != nil {
		p.current.abandoned = true
	}
	if c := p.running; c != nil {
		c.cancel(p.ctx.Err())
	}
}

// isAbandoned reports whether w was abandoned.
func (w *worker) isAbandoned() bool {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.abandoned
}

// callOn runs fn, which touches the storage of the job's slot s, on the
// worker w, watched by the pass: abandoned when it takes longer than
// bound, or, with progress, when progress does not move for bound. fn's
// context ends when the call is abandoned. s stays busy until fn
// returns. A call of an abandoned worker returns errAbandoned, at once
// when the worker was abandoned before it.
func callOn[T any](w *worker, s *slot, bound time.Duration, progress *atomic.Uint64, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	p, u := w.p, w.p.u
	ctx, cancel := context.WithCancelCause(p.ctx)
	defer cancel(nil)
	p.mu.Lock()
	if w.abandoned {
		p.mu.Unlock()
		return zero, errAbandoned
	}
	done := make(chan struct{})
	u.mu.Lock()
	s.busy = done
	u.mu.Unlock()
	c := &call{w: w, job: w.job, bound: bound, progress: progress, deadline: time.Now().Add(bound), cancel: cancel}
	if progress != nil {
		c.seen = progress.Load()
	}
	p.running = c
	p.mu.Unlock()
	v, err := fn(ctx)
	close(done)
	p.mu.Lock()
	abandoned := w.abandoned
	if p.running == c {
		p.running = nil
	}
	p.mu.Unlock()
	if abandoned {
		return zero, errAbandoned
	}
	return v, err
}
