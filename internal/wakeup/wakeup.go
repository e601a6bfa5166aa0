// Package wakeup is the level-triggered wake-up signal of the agent's loops:
// any number of Notify calls collapse into one pending wake-up, and a loop
// that has not picked a wake-up up for too long reports itself stuck (the
// liveness probe). It starts no goroutines.
package wakeup

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Signal is a coalescing wake-up. The zero value is not usable; use New.
type Signal struct {
	name    string
	c       chan struct{}
	pending atomic.Int64 // unix nanos of the oldest wake-up not yet taken, 0 if none
}

// New returns a signal for the loop called name.
func New(name string) *Signal {
	return &Signal{name: name, c: make(chan struct{}, 1)}
}

// Notify asks the loop for a pass. It never blocks.
func (s *Signal) Notify() {
	s.pending.CompareAndSwap(0, time.Now().UnixNano())
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// C receives when a pass is wanted.
func (s *Signal) C() <-chan struct{} { return s.c }

// Taken records that the loop is starting a pass, covering every wake-up so far.
func (s *Signal) Taken() { s.pending.Store(0) }

// Stuck returns an error when a wake-up has waited longer than limit.
func (s *Signal) Stuck(limit time.Duration) error {
	since := s.pending.Load()
	if since == 0 {
		return nil
	}
	if waited := time.Since(time.Unix(0, since)); waited > limit {
		return fmt.Errorf("%s loop has not run for %s after a change", s.name, waited.Round(time.Second))
	}
	return nil
}
