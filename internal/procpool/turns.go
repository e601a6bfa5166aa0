package procpool

import (
	"context"
	"fmt"
	"time"
)

// waitTurn waits until the request may use a child, until ctx ends, and
// returns its turn. A request gets a turn at once while fewer than size
// hold one; past that, once every holder has held its turn for busyAfter
// (their children are slow: hung storage, most likely), the requests
// waiting get extra turns, up to maxChildren in all. Requests wait in
// order of arrival. So a request waits for a child at most busyAfter
// while fewer than maxChildren are busy, whatever they are stuck on.
// While maxStuck abandoned children are stuck in the kernel, it refuses
// at once.
func (p *Pool) waitTurn(ctx context.Context) (uint64, error) {
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return 0, ErrClosed
	case ctx.Err() != nil:
		p.mu.Unlock()
		return 0, fmt.Errorf("wait for a child process: %w", ctx.Err())
	case p.unreaped.Load() >= int64(p.maxStuck):
		p.mu.Unlock()
		p.refused.Add(1)
		return 0, fmt.Errorf("%w: %d of them, the most there may be", ErrTooManyStuck, p.maxStuck)
	}
	now := time.Now()
	if len(p.waiting) == 0 && p.mayTurnLocked(now) {
		turn := p.turnLocked(now)
		p.mu.Unlock()
		return turn, nil
	}
	w := &waiter{granted: make(chan struct{})}
	p.waiting = append(p.waiting, w)
	p.armExtraLocked(now)
	p.mu.Unlock()
	select {
	case <-w.granted:
		return w.turn, nil
	case <-ctx.Done():
		p.withdraw(w)
		return 0, fmt.Errorf("wait for a child process: %w", ctx.Err())
	case <-p.closing:
		p.withdraw(w)
		return 0, ErrClosed
	}
}

// mayTurnLocked reports whether one more request may hold a turn now.
func (p *Pool) mayTurnLocked(now time.Time) bool {
	return len(p.turns) < p.limitLocked(now)
}

// limitLocked is how many turns there may be now: size, or maxChildren
// while every turn has been held for busyAfter. Those all grow old
// together, so a burst of requests behind hung ones gets its extra
// children at once, not one per busyAfter.
func (p *Pool) limitLocked(now time.Time) int {
	if len(p.turns) < p.size {
		return p.size
	}
	for _, since := range p.turns {
		if now.Sub(since) < p.busyAfter {
			return p.size
		}
	}
	return p.maxChildren
}

// turnLocked gives a turn.
func (p *Pool) turnLocked(now time.Time) uint64 {
	p.lastTurn++
	p.turns[p.lastTurn] = now
	return p.lastTurn
}

// giveBack ends a turn and hands turns to the requests waiting.
func (p *Pool) giveBack(turn uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.turns, turn)
	p.grantLocked(time.Now())
}

// grantLocked gives turns to the oldest requests waiting, as many as may
// have one now, and arms the timer for the next extra one.
func (p *Pool) grantLocked(now time.Time) {
	limit := p.limitLocked(now)
	for len(p.waiting) > 0 && !p.closed && len(p.turns) < limit {
		w := p.waiting[0]
		p.waiting[0] = nil
		p.waiting = p.waiting[1:]
		w.turn = p.turnLocked(now)
		close(w.granted)
	}
	p.armExtraLocked(now)
}

// armExtraLocked makes the extra timer fire when the youngest turn has
// been held for busyAfter, while requests wait and an extra child may
// start.
func (p *Pool) armExtraLocked(now time.Time) {
	if p.extra != nil || len(p.waiting) == 0 || p.closed || len(p.turns) >= p.maxChildren {
		return
	}
	var youngest time.Time
	for _, since := range p.turns {
		if since.After(youngest) {
			youngest = since
		}
	}
	p.extra = time.AfterFunc(youngest.Add(p.busyAfter).Sub(now), func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.extra = nil
		p.grantLocked(time.Now())
	})
}

// withdraw takes w out of the requests waiting; a turn granted to it
// meanwhile is given back.
func (p *Pool) withdraw(w *waiter) {
	p.mu.Lock()
	for i, o := range p.waiting {
		if o == w {
			p.waiting = append(p.waiting[:i], p.waiting[i+1:]...)
			p.mu.Unlock()
			return
		}
	}
	p.mu.Unlock()
	p.giveBack(w.turn) // not waiting: it was granted
}
