// Package inflight keeps at most one call per key running, for calls that
// can outlive the caller that gave up on them at its deadline (a stat, a
// checker process or a mount(8) stuck on hung storage): the next call on
// the key waits for the one still running, rather than pile another on it.
// It starts no goroutine.
package inflight

import (
	"context"
	"sync"
)

// Set is a set of keys with a call running. The zero value is ready.
type Set struct {
	mu      sync.Mutex
	running map[string]chan struct{} // guarded by mu; closed when the call ends
}

// Begin waits until no call on key is running, then marks one as running
// and returns its end, to call once the call really returns. When ctx ends
// first it returns ctx's error and marks nothing.
func (s *Set) Begin(ctx context.Context, key string) (func(), error) {
	for {
		s.mu.Lock()
		busy, ok := s.running[key]
		if !ok {
			if s.running == nil {
				s.running = map[string]chan struct{}{}
			}
			done := make(chan struct{})
			s.running[key] = done
			s.mu.Unlock()
			return func() { s.end(key, done) }, nil
		}
		s.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *Set) end(key string, done chan struct{}) {
	s.mu.Lock()
	delete(s.running, key)
	s.mu.Unlock()
	close(done)
}
