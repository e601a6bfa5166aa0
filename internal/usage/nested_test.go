package usage

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestNestedTimerOnlyWhileLimited: with no volume the agent limits, Run
// does not wake every NestedPeriod (nothing is due for an hour, so its
// timer does not fire at all); with one, it searches it every
// NestedPeriod.
func TestNestedTimerOnlyWhileLimited(t *testing.T) {
	tg := &targets{}
	tg.set(Target{Key: dsw0, Path: t.TempDir()})
	var searched atomic.Int32
	u := New(Config{Targets: tg, Period: time.Hour, NestedPeriod: 5 * time.Millisecond})
	u.cfg.nested = func(string) (uint64, []uint64, error) {
		searched.Add(1)
		return 256, nil, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- u.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, u.synced)
	time.Sleep(100 * time.Millisecond) // 20 NestedPeriods
	if n := u.wakes.Load(); n != 0 || searched.Load() != 0 {
		t.Fatalf("no volume limited: Run's timer woke it %d times, %d searches; want none", n, searched.Load())
	}
	tg.set(Target{Key: dsw0, Path: t.TempDir(), QuotaLimit: 1 << 20})
	u.Notify()
	waitFor(t, func() bool { return searched.Load() >= 3 })
}

// synced reports whether the targets were read.
func (u *Usage) synced() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.slots) > 0
}
