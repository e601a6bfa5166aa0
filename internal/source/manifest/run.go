package manifest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

const (
	// debounceDelay is how long the directory must be quiet before a rescan.
	debounceDelay = 50 * time.Millisecond
	// debounceMax bounds how long a stream of events can put a rescan off.
	debounceMax = 500 * time.Millisecond
)

// Run scans the directory, then rescans it after every burst of fsnotify
// events and on a jittered resync, until ctx ends. It returns nil then, and
// an error only when the directory cannot be watched at all. The watcher's
// goroutine is the only one started, and it is joined before Run returns.
func (s *Source) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("manifest source is already running")
	}
	defer s.running.Store(false)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch manifest directory %q: %w", s.dir, err)
	}
	defer func() { _ = w.Close() }() // Close waits for the watcher's goroutine.
	if err := w.Add(s.dir); err != nil {
		return fmt.Errorf("watch manifest directory %q: %w", s.dir, err)
	}
	s.logger.Info("manifest source started", zap.Duration("resync", s.resync))
	s.rescan()
	return s.loop(ctx, w)
}

// loop is the event loop: every event (re)arms the debounce timer, which
// triggers a rescan; the resync timer rescans regardless.
func (s *Source) loop(ctx context.Context, w *fsnotify.Watcher) error {
	d := newDebouncer()
	defer d.timer.Stop()
	resync := time.NewTimer(jitter(s.resync))
	defer resync.Stop()
	recheck := time.NewTimer(time.Hour)
	recheck.Stop()
	defer recheck.Stop()
	for {
		s.armRecheck(recheck)
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("manifest directory watcher closed")
			}
			s.logger.Debug("manifest directory event", zap.String("file", ev.Name), zap.String("op", ev.Op.String()))
			d.trigger(time.Now())
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("manifest directory watcher closed")
			}
			s.logger.Info("manifest directory watch error, rescanning", zap.Error(err))
			d.trigger(time.Now())
		case <-d.timer.C:
			d.fired()
			s.rescan()
		case <-recheck.C:
			s.rescan()
		case <-resync.C:
			s.rewatch(w)
			s.rescan()
			resync.Reset(jitter(s.resync))
		}
	}
}

// armRecheck sets t to fire when a held-back file is due (see holdBack).
func (s *Source) armRecheck(t *time.Timer) {
	if due := s.scanner.recheck; !due.IsZero() {
		t.Reset(max(time.Until(due), time.Millisecond))
	}
}

// rescan scans the directory and publishes the result.
func (s *Source) rescan() {
	start := time.Now()
	s.publish(s.scanner.scan())
	s.logger.Debug("manifest directory scanned", zap.Duration("took", time.Since(start)))
}

// rewatch adds the directory to the watcher again, in case it was removed
// and created anew (a watch follows the old directory). It is a no-op for a
// directory that is still watched.
func (s *Source) rewatch(w *fsnotify.Watcher) {
	if err := w.Add(s.dir); err != nil {
		s.logger.Debug("cannot watch manifest directory", zap.Error(err))
	}
}

// jitter returns d ±10%.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
}

// debouncer fires debounceDelay after the last event of a burst, but no
// later than debounceMax after its first event.
type debouncer struct {
	timer    *time.Timer
	deadline time.Time // zero when no rescan is pending
}

func newDebouncer() *debouncer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &debouncer{timer: t}
}

func (d *debouncer) trigger(now time.Time) {
	if d.deadline.IsZero() {
		d.deadline = now.Add(debounceMax)
	}
	if now.Add(debounceDelay).Before(d.deadline) {
		d.timer.Reset(debounceDelay)
	}
}

func (d *debouncer) fired() { d.deadline = time.Time{} }
