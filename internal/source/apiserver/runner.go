package apiserver

import (
	"context"
	"sync"
)

// runner starts goroutines that all end with one context and joins them.
type runner struct {
	mu  sync.Mutex
	ctx context.Context // guarded by mu; nil until start
	wg  sync.WaitGroup
}

func (r *runner) start(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ctx = ctx
}

// context returns the context goroutines run under, or nil before start.
func (r *runner) context() context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctx
}

// run starts fn(ctx) on a goroutine.
func (r *runner) run(ctx context.Context, fn func(context.Context)) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		fn(ctx)
	}()
}

// wait joins every goroutine started.
func (r *runner) wait() { r.wg.Wait() }
