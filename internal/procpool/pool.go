package procpool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// DefaultSize is the number of children when Config.Size is 0, and
// MaxSize the most there can be: each child is a whole copy of the
// agent's binary, a few MiB of memory.
const (
	DefaultSize = 2
	MaxSize     = 8
)

// DefaultIdleTimeout is Config.IdleTimeout's default: long enough for a
// child to serve a whole burst of pods, short enough that an agent with
// nothing to check holds no child for long.
const DefaultIdleTimeout = time.Minute

// ErrClosed is the error of a request made after Close.
var ErrClosed = errors.New("process pool closed")

// Config configures a Pool.
type Config struct {
	// Command starts a child: a program, then its arguments. The child
	// must run Serve on its standard input and output. Required.
	Command []string
	// Size is the most children running at once, so the most requests
	// answered at once; DefaultSize if 0, at most MaxSize.
	Size int
	// IdleTimeout stops a child that has answered no request for that
	// long; DefaultIdleTimeout if 0.
	IdleTimeout time.Duration
	// Stderr is the children's standard error (for a panic's trace); nil
	// is /dev/null. A child stuck on hung storage holds it open for as
	// long as it is stuck: not a pipe that someone reads to its end.
	Stderr *os.File
	// Logger logs abandoned children; nil logs nothing.
	Logger *zap.Logger
}

// Pool is a pool of long-lived child processes (see the package comment).
// The zero value is not usable; see New. It starts nothing until the
// first request.
type Pool struct {
	log      *zap.Logger
	start    func() (*child, error)
	idleTime time.Duration
	// turns holds a token per request that may use a child at once
	// (Size): a request holds one from the moment it has a child until
	// it has given the child back or abandoned it. So there are at most
	// Size children (a child is started only when none is idle).
	turns chan struct{}
	// closing is closed by Close.
	closing chan struct{}

	mu     sync.Mutex
	closed bool        // guarded by mu; set when closing is closed
	idle   []*child    // guarded by mu: the children waiting for a request, least recently used first
	retire *time.Timer // guarded by mu: stops the idle children past idleTime; nil when none is idle

	// reaping counts the reapers of abandoned children still waiting
	// (for tests: nothing in the agent waits for them).
	reaping sync.WaitGroup
	// abandoned counts the children killed because a request's deadline
	// passed; unreaped the killed children not gone yet (stuck in the
	// kernel, on hung storage). For Stats.
	abandoned, unreaped atomic.Int64
}

// Stats are a pool's counts for its metrics.
type Stats struct {
	// Abandoned is how many children were killed because a request's
	// deadline passed (hung storage, most likely), since the pool began.
	Abandoned int64
	// Unreaped is how many killed children (abandoned, retired idle or
	// closed) have not ended yet: a process stuck in an uninterruptible
	// wait cannot die until the storage answers.
	Unreaped int64
}

// Stats returns the pool's counts.
func (p *Pool) Stats() Stats {
	return Stats{Abandoned: p.abandoned.Load(), Unreaped: p.unreaped.Load()}
}

// New returns a pool; it starts no process.
func New(cfg Config) (*Pool, error) {
	switch {
	case len(cfg.Command) == 0:
		return nil, errors.New("process pool: Command is required")
	case cfg.Size < 0 || cfg.Size > MaxSize:
		return nil, fmt.Errorf("process pool: Size %d is not between 0 and %d", cfg.Size, MaxSize)
	case cfg.IdleTimeout < 0:
		return nil, fmt.Errorf("process pool: IdleTimeout %v is negative", cfg.IdleTimeout)
	}
	if cfg.Size == 0 {
		cfg.Size = DefaultSize
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	command := append([]string(nil), cfg.Command...)
	return newPool(cfg.Size, cfg.IdleTimeout, cfg.Logger, func() (*child, error) { return startProcess(command, cfg.Stderr) }), nil
}

func newPool(size int, idleTime time.Duration, log *zap.Logger, start func() (*child, error)) *Pool {
	p := &Pool{log: log, start: start, idleTime: idleTime, turns: make(chan struct{}, size), closing: make(chan struct{})}
	for range size {
		p.turns <- struct{}{}
	}
	return p
}

// Do sends req to a child and returns its answer. It waits for a child
// (or starts one) until ctx ends; then, if the child does not answer
// before ctx ends, it abandons the child and returns an error at once.
//
// release is called exactly once, when no process works on req any more:
// before Do returns, or, for a request whose child was abandoned, once the
// kernel has let that child go, which may be never. A caller keeps one
// request per resource in flight with it (see internal/inflight), so that
// retries on hung storage wait instead of each abandoning one more child.
//
// A child found dead when the request is sent (an idle child killed by
// the OOM killer) never saw the request: it is replaced and the request
// sent again, once.
func (p *Pool) Do(ctx context.Context, req []byte, release func()) ([]byte, error) {
	if len(req) > MaxFrame {
		release()
		return nil, fmt.Errorf("request of %d bytes, more than %d", len(req), MaxFrame)
	}
	for attempt := 0; ; attempt++ {
		answer, err := p.doOnce(ctx, req, release, attempt == 0)
		if errors.Is(err, errNotSent) && attempt == 0 {
			continue
		}
		return answer, err
	}
}

// doOnce sends req to a child, calling release as Do says, except when
// retry is true and req was not sent.
func (p *Pool) doOnce(ctx context.Context, req []byte, release func(), retry bool) ([]byte, error) {
	c, err := p.acquire(ctx)
	if err != nil {
		release()
		return nil, err
	}
	defer func() { p.turns <- struct{}{} }()
	if err := ctx.Err(); err != nil { // select may pick a turn over a context that ended
		p.put(c)
		release()
		return nil, fmt.Errorf("wait for a child process: %w", err)
	}
	answer, err := c.exchange(ctx, req)
	switch {
	case errors.Is(err, errNotSent) && retry:
		p.abandon(c, func() {}, err)
	case err != nil:
		p.abandon(c, release, err)
	default:
		p.put(c)
		release()
	}
	return answer, err
}

// acquire waits for a turn until ctx ends, then returns an idle child, or
// a new one if none is idle. The caller gives the turn back.
func (p *Pool) acquire(ctx context.Context) (*child, error) {
	select {
	case <-p.turns:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for a child process: %w", ctx.Err())
	case <-p.closing:
		return nil, ErrClosed
	}
	c, err := p.take()
	if err != nil {
		p.turns <- struct{}{}
	}
	return c, err
}

// take returns the most recently used idle child (the others may then
// grow idle enough to stop), or starts one. A child started while Close
// runs is stopped when put back.
func (p *Pool) take() (*child, error) {
	p.mu.Lock()
	closed, n := p.closed, len(p.idle)
	var c *child
	if !closed && n > 0 {
		c = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
	}
	p.mu.Unlock()
	switch {
	case closed: // select chose a turn over closing: both were ready
		return nil, ErrClosed
	case c != nil:
		return c, nil
	}
	return p.start()
}

// put gives c back to the pool, or stops it if the pool is closed.
func (p *Pool) put(c *child) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.abandonLocked(c, func() {})
		return
	}
	c.usedAt = time.Now()
	p.idle = append(p.idle, c)
	p.armLocked()
}

// armLocked makes the retire timer fire when the least recently used
// idle child has been idle for idleTime.
func (p *Pool) armLocked() {
	if p.retire == nil && len(p.idle) > 0 {
		p.retire = time.AfterFunc(time.Until(p.idle[0].usedAt.Add(p.idleTime)), p.retireIdle)
	}
}

// retireIdle stops the children idle for idleTime or longer.
func (p *Pool) retireIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.retire = nil
	if p.closed {
		return
	}
	n := 0
	for n < len(p.idle) && time.Since(p.idle[n].usedAt) >= p.idleTime {
		p.log.Debug("idle child process stopped", zap.Int("pid", p.idle[n].proc.Pid()))
		p.abandonLocked(p.idle[n], func() {})
		n++
	}
	p.idle = append(p.idle[:0], p.idle[n:]...)
	p.armLocked()
}

// abandon kills c and leaves a reaper to call release once c is gone;
// the caller's turn then goes to a replacement.
func (p *Pool) abandon(c *child, release func(), cause error) {
	p.log.Info("child process abandoned", zap.Int("pid", c.proc.Pid()), zap.Error(cause))
	p.abandoned.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.abandonLocked(c, release)
}

func (p *Pool) abandonLocked(c *child, release func()) {
	c.kill()
	p.reaping.Add(1)
	p.unreaped.Add(1)
	go func() { // the one goroutine no one joins: it waits on the kernel
		defer p.reaping.Done()
		defer release()
		_ = c.proc.Wait()
		p.unreaped.Add(-1)
		p.log.Debug("child process reaped", zap.Int("pid", c.proc.Pid()))
	}()
}

// Close stops the idle children and makes every later request, and every
// request waiting for a child, fail with ErrClosed. A child still working
// on a request is stopped when the request ends. Close waits for no
// process.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	close(p.closing)
	if p.retire != nil {
		p.retire.Stop()
		p.retire = nil
	}
	for _, c := range p.idle {
		p.abandonLocked(c, func() {})
	}
	p.idle = nil
}

// Run blocks until ctx ends, then closes the pool; it returns nil.
func (p *Pool) Run(ctx context.Context) error {
	<-ctx.Done()
	p.Close()
	return nil
}
