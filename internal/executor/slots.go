package executor

import "sync"

// slots bounds how many operations run at once. A burst of a thousand pods
// starts four thousand operations; run together they all finish late (each
// gets a sliver of two cores, and the kernel serialises mounts anyway) and
// crowd out the API watches. Queued in order, the first pods are ready
// while the last still wait.
//
// Waiters are served first come, first served, in the order Start queued
// them, so one pod's volumes (started together) finish together.
type slots struct {
	mu    sync.Mutex
	free  int
	queue []chan struct{} // waiting, oldest first; guarded by mu
}

func newSlots(n int) *slots { return &slots{free: n} }

// take returns a channel that is closed once the caller holds a slot.
func (s *slots) take() chan struct{} {
	granted := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free > 0 {
		s.free--
		close(granted)
	} else {
		s.queue = append(s.queue, granted)
	}
	return granted
}

// give returns a slot: to the oldest waiter, if any.
func (s *slots) give() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 {
		close(s.queue[0])
		s.queue = s.queue[1:]
		return
	}
	s.free++
}

// abandon withdraws a waiter that no longer wants its slot; one granted
// meanwhile is given back.
func (s *slots) abandon(granted chan struct{}) {
	s.mu.Lock()
	for i, ch := range s.queue {
		if ch == granted {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			s.mu.Unlock()
			return
		}
	}
	s.mu.Unlock()
	s.give() // not queued: it was granted
}

// waiting returns how many operations wait for a slot.
func (s *slots) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}
