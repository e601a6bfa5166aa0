package procpool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// DefaultSize is the number of children kept when Config.Size is 0, and
// MaxSize the most Size can be: each child is a whole copy of the
// agent's binary, a few MiB of memory.
const (
	DefaultSize = 2
	MaxSize     = 8
)

// DefaultMaxChildren is Config.MaxChildren's default: the executor's
// parallelism (internal/executor), the most operations that ask the pool
// at once, so a request never waits for a child behind slow ones.
const DefaultMaxChildren = 16

// DefaultIdleTimeout is Config.IdleTimeout's default: long enough for a
// child to serve a whole burst of pods, short enough that an agent with
// nothing to check holds no child for long.
const DefaultIdleTimeout = time.Minute

// DefaultRequestTimeout is Config.RequestTimeout's default: a check or an
// open of a path on a file system that answers takes milliseconds; five
// seconds without an answer is storage that does not answer.
const DefaultRequestTimeout = 5 * time.Second

// DefaultBusyAfter is Config.BusyAfter's default: a child that has worked
// on a request for a second is slow, and a request waiting behind it gets
// an extra child.
const DefaultBusyAfter = time.Second

// DefaultMaxStuck is Config.MaxStuck's default. A stuck child is a process
// in an uninterruptible wait (a few MiB, a pid); each hung file system
// holds about one, as its users do not ask again while one is stuck.
const DefaultMaxStuck = 32

// ErrClosed is the error of a request made after Close.
var ErrClosed = errors.New("process pool closed")

// ErrNoAnswer is wrapped by the error of a request whose child did not
// answer before the request's deadline (Config.RequestTimeout) or its
// context ended: its storage does not answer.
var ErrNoAnswer = errors.New("no answer before the deadline")

// ErrTooManyStuck is the error of a request refused because MaxStuck
// children are stuck in the kernel: no new child is risked until one ends.
var ErrTooManyStuck = errors.New("too many child processes stuck on storage that does not answer")

// Config configures a Pool.
type Config struct {
	// Command starts a child: a program, then its arguments. The child
	// must run Serve (or ServeFiles, with PassFiles) on its standard input
	// and output. Required.
	Command []string
	// Size is the children kept while requests are answered promptly;
	// DefaultSize if 0, at most MaxSize.
	Size int
	// MaxChildren is the most children working at once: past Size, an
	// extra child starts for a waiting request when every working child
	// has worked on its request for BusyAfter. DefaultMaxChildren if 0; at
	// least Size.
	MaxChildren int
	// BusyAfter is how long every child must have worked on its request
	// before a waiting request gets an extra child; DefaultBusyAfter if 0.
	BusyAfter time.Duration
	// RequestTimeout is each request's own deadline, whatever its
	// context's: a child that has not answered by then is abandoned.
	// DefaultRequestTimeout if 0.
	RequestTimeout time.Duration
	// MaxStuck is the most abandoned children not ended yet (stuck in the
	// kernel) before requests are refused with ErrTooManyStuck;
	// DefaultMaxStuck if 0.
	MaxStuck int
	// IdleTimeout stops a child that has answered no request for that
	// long; DefaultIdleTimeout if 0.
	IdleTimeout time.Duration
	// PassFiles gives each child a unix socket as its descriptor 3, on
	// which ServeFiles passes the descriptors its answers carry (DoFile).
	PassFiles bool
	// Stderr is the children's standard error (for a panic's trace); nil
	// is /dev/null. A child stuck on hung storage holds it open for as
	// long as it is stuck: not a pipe that someone reads to its end.
	Stderr *os.File
	// Logger logs abandoned children; nil logs nothing.
	Logger *zap.Logger
}

// limits are a pool's bounds, from its Config.
type limits struct {
	size, maxChildren, maxStuck int
	busyAfter, requestTimeout   time.Duration
	idleTime                    time.Duration
}

// Pool is a pool of long-lived child processes (see the package comment).
// The zero value is not usable; see New. It starts nothing until the
// first request.
type Pool struct {
	log   *zap.Logger
	start func() (*child, error)
	limits
	// closing is closed by Close.
	closing chan struct{}

	mu     sync.Mutex
	closed bool        // guarded by mu; set when closing is closed
	idle   []*child    // guarded by mu: the children waiting for a request, least recently used first
	retire *time.Timer // guarded by mu: stops the idle children past idleTime; nil when none is idle
	// turns are the requests that hold a child (or are starting one), by
	// number, with when each got it: at most maxChildren, and more than
	// size only while every one of them is older than busyAfter. Guarded
	// by mu.
	turns    map[uint64]time.Time
	lastTurn uint64 // guarded by mu: the number of the last turn given
	// waiting are the requests waiting for a turn, oldest first; guarded
	// by mu.
	waiting []*waiter
	// extra wakes the waiting requests up when the youngest turn becomes
	// older than busyAfter; nil when not armed. Guarded by mu.
	extra *time.Timer

	// reaping counts the reapers of abandoned children still waiting
	// (for tests: nothing in the agent waits for them).
	reaping sync.WaitGroup
	// abandoned counts the children killed because a request's deadline
	// passed; unreaped the killed children not gone yet (stuck in the
	// kernel, on hung storage); refused the requests refused because
	// maxStuck were unreaped. For Stats.
	abandoned, unreaped, refused atomic.Int64
}

// waiter is a request waiting for a turn: granted is closed once it has
// one, numbered turn.
type waiter struct {
	granted chan struct{}
	turn    uint64
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
	// Refused is how many requests were refused because MaxStuck children
	// were stuck, since the pool began.
	Refused int64
	// MaxStuck is the pool's bound on Unreaped.
	MaxStuck int64
}

// Stats returns the pool's counts.
func (p *Pool) Stats() Stats {
	return Stats{Abandoned: p.abandoned.Load(), Unreaped: p.unreaped.Load(), Refused: p.refused.Load(), MaxStuck: int64(p.maxStuck)}
}

// New returns a pool; it starts no process.
func New(cfg Config) (*Pool, error) {
	switch {
	case len(cfg.Command) == 0:
		return nil, errors.New("process pool: Command is required")
	case cfg.Size < 0 || cfg.Size > MaxSize:
		return nil, fmt.Errorf("process pool: Size %d is not between 0 and %d", cfg.Size, MaxSize)
	case cfg.IdleTimeout < 0 || cfg.RequestTimeout < 0 || cfg.BusyAfter < 0:
		return nil, fmt.Errorf("process pool: a negative time in %+v", cfg)
	case cfg.MaxChildren < 0 || cfg.MaxStuck < 0:
		return nil, fmt.Errorf("process pool: MaxChildren %d or MaxStuck %d is negative", cfg.MaxChildren, cfg.MaxStuck)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	command := append([]string(nil), cfg.Command...)
	return newPool(limitsOf(cfg), cfg.Logger, func() (*child, error) { return startProcess(command, cfg.Stderr, cfg.PassFiles) }), nil
}

// limitsOf returns cfg's bounds, defaults filled in.
func limitsOf(cfg Config) limits {
	l := limits{size: cmp.Or(cfg.Size, DefaultSize), maxChildren: cmp.Or(cfg.MaxChildren, DefaultMaxChildren),
		maxStuck: cmp.Or(cfg.MaxStuck, DefaultMaxStuck), busyAfter: cmp.Or(cfg.BusyAfter, DefaultBusyAfter),
		requestTimeout: cmp.Or(cfg.RequestTimeout, DefaultRequestTimeout), idleTime: cmp.Or(cfg.IdleTimeout, DefaultIdleTimeout)}
	l.maxChildren = max(l.maxChildren, l.size)
	return l
}

func newPool(l limits, log *zap.Logger, start func() (*child, error)) *Pool {
	return &Pool{log: log, start: start, limits: l, closing: make(chan struct{}), turns: map[uint64]time.Time{}}
}

// Do sends req to a child and returns its answer. It waits for a child
// (or starts one) until ctx ends; then, if the child does not answer
// before ctx ends or the pool's RequestTimeout passes, it abandons the
// child and returns an error (wrapping ErrNoAnswer) at once.
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
	answer, f, err := p.DoFile(ctx, req, release)
	if f != nil {
		_ = f.Close()
	}
	return answer, err
}

// DoFile is Do for a pool with PassFiles: it also returns the descriptor
// the child passed with its answer, if any (the caller closes it).
func (p *Pool) DoFile(ctx context.Context, req []byte, release func()) ([]byte, *os.File, error) {
	if len(req) > MaxFrame {
		release()
		return nil, nil, fmt.Errorf("request of %d bytes, more than %d", len(req), MaxFrame)
	}
	for attempt := 0; ; attempt++ {
		answer, f, err := p.doOnce(ctx, req, release, attempt == 0)
		if errors.Is(err, errNotSent) && attempt == 0 {
			continue
		}
		return answer, f, err
	}
}

// doOnce sends req to a child, calling release as Do says, except when
// retry is true and req was not sent.
func (p *Pool) doOnce(ctx context.Context, req []byte, release func(), retry bool) ([]byte, *os.File, error) {
	c, turn, err := p.acquire(ctx)
	if err != nil {
		release()
		return nil, nil, err
	}
	defer p.giveBack(turn)
	if err := ctx.Err(); err != nil { // select may pick a turn over a context that ended
		p.put(c)
		release()
		return nil, nil, fmt.Errorf("wait for a child process: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, p.requestTimeout)
	defer cancel()
	answer, f, err := c.exchange(rctx, req)
	switch {
	case errors.Is(err, errNotSent) && retry:
		p.abandon(c, func() {}, err)
	case errors.Is(err, ErrNoAnswer) && ctx.Err() == nil:
		err = fmt.Errorf("%w: the pool's deadline of %v passed", err, p.requestTimeout)
		p.abandon(c, release, err)
	case err != nil:
		p.abandon(c, release, err)
	default:
		p.put(c)
		release()
	}
	return answer, f, err
}

// acquire waits for a turn until ctx ends, then returns an idle child, or
// a new one if none is idle, and the turn, which the caller gives back.
func (p *Pool) acquire(ctx context.Context) (*child, uint64, error) {
	turn, err := p.waitTurn(ctx)
	if err != nil {
		return nil, 0, err
	}
	c, err := p.take()
	if err != nil {
		p.giveBack(turn)
		return nil, 0, err
	}
	return c, turn, nil
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
	if p.extra != nil {
		p.extra.Stop()
		p.extra = nil
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
