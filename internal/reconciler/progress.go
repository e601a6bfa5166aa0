package reconciler

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// progressEvery is how often an operation that is still running says so:
// a slow mount, a large payload or an ownership change over a big volume
// logs its progress instead of going quiet until its deadline.
const progressEvery = 10 * time.Second

// progress logs "volume operation still running" with the time elapsed,
// every, until stop is called. It starts no goroutine of its own: each log
// line is a timer's callback, and none runs after stop returns.
func progress(log *zap.Logger, op string, every time.Duration) (stop func()) {
	start := time.Now()
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	var tick func()
	tick = func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		log.Info("volume operation still running", zap.String("operation", op), zap.Duration("elapsed", time.Since(start).Round(time.Second)))
		t = time.AfterFunc(every, tick)
	}
	mu.Lock()
	t = time.AfterFunc(every, tick)
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}
