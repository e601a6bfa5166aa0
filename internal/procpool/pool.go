package procpool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"go.uber.org/zap"
)

// DefaultSize is the number of children when Config.Size is 0, and
// MaxSize the most there can be: each child is a whole copy of the
// agent's binary, a few MiB of memory.
const (
	DefaultSize = 2
	MaxSize     = 8
)

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
	log   *zap.Logger
	start func() (*child, error)
	// idle holds the children waiting for a request, spare a token per
	// child that may still be started; together at most Size.
	idle  chan *child
	spare chan struct{}
	// closing is closed by Close.
	closing chan struct{}

	mu     sync.Mutex
	closed bool // guarded by mu; set when closing is closed

	// reaping counts the reapers of abandoned children still waiting
	// (for tests: nothing in the agent waits for them).
	reaping sync.WaitGroup
}

// New returns a pool; it starts no process.
func New(cfg Config) (*Pool, error) {
	switch {
	case len(cfg.Command) == 0:
		return nil, errors.New("process pool: Command is required")
	case cfg.Size < 0 || cfg.Size > MaxSize:
		return nil, fmt.Errorf("process pool: Size %d is not between 0 and %d", cfg.Size, MaxSize)
	case cfg.Size == 0:
		cfg.Size = DefaultSize
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	command := append([]string(nil), cfg.Command...)
	return newPool(cfg.Size, cfg.Logger, func() (*child, error) { return startProcess(command, cfg.Stderr) }), nil
}

func newPool(size int, log *zap.Logger, start func() (*child, error)) *Pool {
	p := &Pool{log: log, start: start, idle: make(chan *child, size), spare: make(chan struct{}, size), closing: make(chan struct{})}
	for range size {
		p.spare <- struct{}{}
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
		c, err := p.acquire(ctx)
		if err != nil {
			release()
			return nil, err
		}
		answer, err := c.exchange(ctx, req)
		switch {
		case errors.Is(err, errNotSent) && attempt == 0:
			p.abandon(c, func() {}, err)
			continue
		case err != nil:
			p.abandon(c, release, err)
			return nil, err
		}
		p.put(c)
		release()
		return answer, nil
	}
}

// acquire returns an idle child, or starts one if the pool has fewer than
// Size, else waits for one of those until ctx ends.
func (p *Pool) acquire(ctx context.Context) (*child, error) {
	select {
	case <-p.closing:
		return nil, ErrClosed
	case c := <-p.idle: // a running child first: start no more than needed
		return c, nil
	default:
	}
	select {
	case c := <-p.idle:
		return c, nil
	case <-p.spare:
		return p.startChild()
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for a child process: %w", ctx.Err())
	case <-p.closing:
		return nil, ErrClosed
	}
}

// startChild starts a child in the slot the caller took from spare.
// A child started while Close runs is stopped when put back.
func (p *Pool) startChild() (*child, error) {
	p.mu.Lock()
	closed := p.closed // select chose spare over closing: both were ready
	p.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	c, err := p.start()
	if err != nil {
		p.spare <- struct{}{}
		return nil, err
	}
	return c, nil
}

// put gives c back to the pool, or stops it if the pool is closed.
func (p *Pool) put(c *child) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.abandonLocked(c, func() {})
		return
	}
	p.idle <- c // never blocks: at most Size children exist
}

// abandon kills c, gives its slot to a replacement and leaves a reaper to
// call release once c is gone.
func (p *Pool) abandon(c *child, release func(), cause error) {
	p.log.Info("child process abandoned", zap.Int("pid", c.proc.Pid()), zap.Error(cause))
	p.mu.Lock()
	defer p.mu.Unlock()
	p.abandonLocked(c, release)
	if !p.closed {
		p.spare <- struct{}{}
	}
}

func (p *Pool) abandonLocked(c *child, release func()) {
	c.kill()
	p.reaping.Add(1)
	go func() { // the one goroutine no one joins: it waits on the kernel
		defer p.reaping.Done()
		defer release()
		_ = c.proc.Wait()
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
	for {
		select {
		case c := <-p.idle:
			p.abandonLocked(c, func() {})
		default:
			return
		}
	}
}

// Run blocks until ctx ends, then closes the pool; it returns nil.
func (p *Pool) Run(ctx context.Context) error {
	<-ctx.Done()
	p.Close()
	return nil
}
