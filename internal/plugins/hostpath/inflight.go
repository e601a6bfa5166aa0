package hostpath

import (
	"context"
	"fmt"
)

// startCheck waits until no check of the host path p is running, then
// marks one as running and returns the function that ends it, to call when
// the check really returns. The wait ends with ctx.
//
// A check stuck on hung storage outlives the operation that started it
// (mount.Bounded gives up on it). Without this, every retry of the volume
// would leave one more process (or thread) stuck on the same path; with it,
// each path has at most one, and retries wait for it.
func (p *Plugin) startCheck(ctx context.Context, path string) (func(), error) {
	for {
		p.mu.Lock()
		running, busy := p.checking[path]
		if !busy {
			if p.checking == nil {
				p.checking = map[string]chan struct{}{}
			}
			done := make(chan struct{})
			p.checking[path] = done
			p.mu.Unlock()
			return func() { p.endCheck(path, done) }, nil
		}
		p.mu.Unlock()
		select {
		case <-running:
		case <-ctx.Done():
			return nil, fmt.Errorf("an earlier check of %s has not returned (is its storage hung?): %w", path, ctx.Err())
		}
	}
}

func (p *Plugin) endCheck(path string, done chan struct{}) {
	p.mu.Lock()
	delete(p.checking, path)
	p.mu.Unlock()
	close(done)
}
