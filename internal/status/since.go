package status

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// stateClock remembers since when each volume has shown its state, for the
// API's "since" field (from which `volume-agent status` shows an age).
//
// The first computation of a pod's status that sees a volume in a new state
// records the time; later ones read it. The Server's recorder computes every
// pod that changed soon after it is told of the change (Notify hands the
// pods over; Run's recorder goroutine computes them, many changes of a
// burst at once), so the time is when the state changed, to within that
// delay. A pod's computation and its
// records happen under one lock: the records follow the order of the
// snapshots they come from, and a slow reader holding an older snapshot
// never overwrites the time of a newer state. After a restart every state
// is new: since is at most the agent's start.
type stateClock struct {
	now func() time.Time

	mu   sync.Mutex
	pods map[types.UID]map[string]stamp // guarded by mu; by pod, then desired volume name
}

// stamp is a volume's state and when it was first seen.
type stamp struct {
	state string
	at    time.Time
}

func newStateClock(now func() time.Time) *stateClock {
	if now == nil {
		now = time.Now
	}
	return &stateClock{now: now, pods: map[types.UID]map[string]stamp{}}
}

// pod computes the status of pod uid from w, with the since of each volume
// as recorded; a state the recorder has not seen yet is new: since now.
// Readers record nothing: only the recorder does, one computation after
// the other, so an older snapshot never overwrites a newer state's time.
// The computation runs outside the lock: readers never wait on each other.
func (c *stateClock) pod(w Worlds, uid types.UID) (Pod, bool) {
	out, volumes, ok := compute(w, uid)
	if !ok {
		return Pod{}, false
	}
	now := c.now().UTC().Truncate(time.Second)
	c.mu.Lock()
	defer c.mu.Unlock()
	stamps := c.pods[uid]
	for i, key := range volumes {
		out.Volumes[i].Since = now
		if s, ok := stamps[key]; ok && s.state == out.Volumes[i].State {
			out.Volumes[i].Since = s.at
		}
	}
	return out, true
}

// record computes pod uid and records since when each of its volumes is in
// its state; the records of a pod that went are dropped. Only the
// recorder calls it.
func (c *stateClock) record(w Worlds, uid types.UID) {
	out, volumes, ok := compute(w, uid)
	now := c.now().UTC().Truncate(time.Second)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !ok {
		delete(c.pods, uid)
		return
	}
	stamps := c.pods[uid]
	if stamps == nil || len(stamps) != len(volumes) {
		stamps = c.keepLocked(uid, volumes)
	}
	for i, key := range volumes {
		if s, ok := stamps[key]; !ok || s.state != out.Volumes[i].State {
			stamps[key] = stamp{state: out.Volumes[i].State, at: now}
		}
	}
}

// keepLocked returns the records of the volumes of pod uid, by key,
// without those of volumes it no longer has.
func (c *stateClock) keepLocked(uid types.UID, volumes []string) map[string]stamp {
	old := c.pods[uid]
	stamps := make(map[string]stamp, len(volumes))
	for _, key := range volumes {
		if s, ok := old[key]; ok {
			stamps[key] = s
		}
	}
	c.pods[uid] = stamps
	return stamps
}

// observe computes the pods that changed (every pod when all), so that the
// time of each new state is recorded when it happens, not when the API is
// next asked; records of pods that went are dropped.
func (c *stateClock) observe(w Worlds, changed []types.UID, all bool) {
	if !all {
		for _, uid := range changed {
			c.record(w, uid)
		}
		return
	}
	shown := map[types.UID]bool{}
	for _, uid := range w.uids() {
		shown[uid] = true
		c.record(w, uid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid := range c.pods {
		if !shown[uid] {
			delete(c.pods, uid)
		}
	}
}

// pendingPods are the pods that changed since the recorder last looked.
type pendingPods struct {
	mu   sync.Mutex
	pods map[types.UID]struct{} // guarded by mu
	all  bool                   // guarded by mu
	wake chan struct{}          // guarded by mu; created on first use, holds one signal
}

func (p *pendingPods) add(changed []types.UID, all bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pods == nil {
		p.pods = map[types.UID]struct{}{}
	}
	for _, uid := range changed {
		p.pods[uid] = struct{}{}
	}
	p.all = p.all || all
	select {
	case p.signal() <- struct{}{}:
	default:
	}
}

// signal returns the recorder's wake-up channel; p.mu must be held.
func (p *pendingPods) signal() chan struct{} {
	if p.wake == nil {
		p.wake = make(chan struct{}, 1)
	}
	return p.wake
}

// take returns the pending pods and forgets them.
func (p *pendingPods) take() (pods []types.UID, all bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for uid := range p.pods {
		pods = append(pods, uid)
	}
	all = p.all
	p.pods, p.all = nil, false
	return pods, all
}

func (p *pendingPods) woken() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.signal()
}

// recordDelay is how long the recorder lets changes gather after the first.
const recordDelay = 200 * time.Millisecond

// recordStates records the states of the pods Notify handed over, until
// ctx ends.
func (s *Server) recordStates(ctx context.Context) {
	wake := s.pending.woken()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		}
		// since is served to the second: waiting a little lets a burst of
		// changes be computed once, not once per change, off the CPU the
		// burst itself needs.
		select {
		case <-ctx.Done():
			return
		case <-time.After(recordDelay):
		}
		s.recordPending()
	}
}

// recordPending records the states of the pods handed over so far.
func (s *Server) recordPending() {
	if s.cfg.Worlds.clock == nil {
		return
	}
	pods, all := s.pending.take()
	if len(pods) > 0 || all {
		s.cfg.Worlds.clock.observe(s.cfg.Worlds, pods, all)
	}
}
