package manifest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
)

// Defaults of the quiet period that events other than a manifest renamed
// into place wait for (see changes).
const (
	// debounceDelay is how long a name (for a full rescan, the directory)
	// must be quiet before it is read.
	debounceDelay = 50 * time.Millisecond
	// debounceMax bounds how long a stream of events can put a read off.
	debounceMax = 500 * time.Millisecond
)

// Run scans the directory, then reads what changed as its events say (see
// changes), follows the path to another directory as soon as it names one
// (see follower), and rescans all of it on a jittered resync, until ctx
// ends. It returns nil then, and an error only when the directory cannot be
// watched at all. The watcher's goroutine is the only one started, and it
// is joined before Run returns.
func (s *Source) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("manifest source is already running")
	}
	defer s.running.Store(false)
	w, err := newWatcher()
	if err != nil {
		return fmt.Errorf("watch manifest directory %q: %w", s.dir, err)
	}
	defer w.close()
	fl := newFollower(s.path, w)
	if _, err := fl.follow(); fl.content < 0 {
		return fmt.Errorf("watch manifest directory %q: %w", s.dir, err)
	} else if err != nil {
		s.logger.Debug("cannot watch the whole path of the manifest directory", zap.Error(err))
	}
	s.logger.Info("manifest source started", zap.Duration("resync", s.resync))
	s.rescan()
	return s.loop(ctx, w, fl)
}

// loop is the event loop: a manifest renamed into place is read at once,
// unless that means listing the directory; the names other events name
// wait for their quiet period (see changes), which the quiet timer ends; a
// change on the path is followed, and a new directory read, at once (see
// scanner.refresh: the old directory's files are orphaned, none removed);
// the recheck timer looks at held-back files and orphans again; the resync
// timer follows the path and rescans the directory once it is quiet. No
// listing of a directory already listed is taken before it is quiet.
func (s *Source) loop(ctx context.Context, w *watcher, fl *follower) error {
	quiet := time.NewTimer(time.Hour)
	quiet.Stop()
	defer quiet.Stop()
	resync := time.NewTimer(jitter(s.resync))
	defer resync.Stop()
	recheck := time.NewTimer(time.Hour)
	recheck.Stop()
	defer recheck.Stop()
	c := newChanges()
	for {
		s.armRecheck(recheck)
		select {
		case <-ctx.Done():
			return nil
		case evs, ok := <-w.batches:
			if !ok {
				return fmt.Errorf("manifest directory watch stopped: %w", w.err)
			}
			now := time.Now()
			if s.note(c, fl, evs, now) && s.follow(fl) {
				s.rescan()
			}
			if in, away := c.takeNow(); len(in)+len(away) > 0 {
				s.readRenamed(c, in, away, now)
			}
		case <-quiet.C:
			now := time.Now()
			if names, full := c.takeLater(now, s.debounce, s.scanner.whole()); full {
				s.rescan()
			} else if len(names) > 0 {
				s.reread(c, names, now)
			}
		case <-recheck.C:
			s.recheck(c, time.Now())
		case <-resync.C:
			if s.follow(fl) {
				s.rescan()
			} else {
				c.rescan(time.Now())
			}
			resync.Reset(jitter(s.resync))
		}
		s.armQuiet(quiet, c)
	}
}

// armQuiet sets t to fire when the first of what waits for a quiet period
// is due, and stops it when nothing waits.
func (s *Source) armQuiet(t *time.Timer, c *changes) {
	if !c.waiting() {
		t.Stop()
		return
	}
	t.Reset(max(time.Until(c.next(s.debounce, s.scanner.whole())), 0))
}

// note records a batch of events in c, and reports whether the path may
// name another directory now.
func (s *Source) note(c *changes, fl *follower, evs []event, now time.Time) (moved bool) {
	links := s.scanner.links()
	for _, ev := range evs {
		s.logger.Debug("manifest directory event", zap.Int("watch", ev.wd), zap.String("file", ev.name), zap.Uint32("mask", ev.mask))
		switch fl.kind(ev) {
		case contentEvent:
			c.add(ev, links, now)
		case pathEvent:
			moved = true
		case lostEvents:
			c.add(ev, links, now)
			moved = true
		}
	}
	return moved
}

// follow resolves the path again and reports whether it names another
// directory than before.
func (s *Source) follow(fl *follower) bool {
	moved, err := fl.follow()
	if err != nil {
		s.logger.Debug("cannot watch the whole path of the manifest directory", zap.Error(err))
	}
	if moved {
		s.scanner.moved = true
	}
	if moved && fl.content >= 0 {
		s.logger.Info("manifest directory path names a new directory", zap.String("target", fl.dir))
	}
	return moved
}

// armRecheck sets t to fire when a held-back file is due (see settle.go).
func (s *Source) armRecheck(t *time.Timer) {
	if due := s.scanner.recheck; !due.IsZero() {
		t.Reset(max(time.Until(due), time.Millisecond))
	}
}

// rescan scans the whole directory and publishes the result.
func (s *Source) rescan() {
	start := time.Now()
	s.publish(s.scanner.scan())
	s.logger.Debug("manifest directory scanned", zap.Duration("took", time.Since(start)))
}

// readRenamed reads the files renamed into place and the names they were
// renamed from at now, publishes the result, and makes the names gone
// since wait for the quiet period. When reading them means listing the
// whole directory (see scanner.whole), or a name renamed from is gone with
// the directory, the listing waits for the directory to be quiet instead:
// taken now it could fall in another name's gap and remove its pods.
func (s *Source) readRenamed(c *changes, in, away []string, now time.Time) {
	if s.scanner.whole() {
		s.waitQuiet(c, "renamed in", in, now)
		return
	}
	start := time.Now()
	snap, gone, list := s.scanner.readRenamed(in, away)
	s.publish(snap)
	s.logger.Debug("manifest directory scanned", zap.Strings("files", in), zap.Strings("from", away), zap.Duration("took", time.Since(start)))
	c.wait(gone, now)
	if list {
		s.waitQuiet(c, "directory gone", away, now)
	}
}

// reread reads the named files again, which are due (see changes), and
// publishes the result; when they are gone with the directory, the
// directory is listed once quiet.
func (s *Source) reread(c *changes, names []string, now time.Time) {
	start := time.Now()
	snap, list := s.scanner.reread(names)
	s.publish(snap)
	s.logger.Debug("manifest directory scanned", zap.Strings("files", names), zap.Duration("took", time.Since(start)))
	if list {
		s.waitQuiet(c, "directory gone", names, now)
	}
}

// recheck looks at the held-back files (see settle.go) and the orphans
// (see refresh) again when they are due: nothing waits for the quiet
// period to be due, so it is read like a file renamed into place: a held
// file gone waits for its quiet period, and a listing (an orphan can only
// go by one) for the directory's.
func (s *Source) recheck(c *changes, now time.Time) {
	s.scanner.recheck = time.Time{} // the next merge sets it again
	if s.scanner.whole() {
		s.waitQuiet(c, "recheck", s.scanner.held, now)
		return
	}
	s.readRenamed(c, s.scanner.held, nil, now)
}

// waitQuiet makes the whole directory be listed once it is quiet.
func (s *Source) waitQuiet(c *changes, why string, names []string, now time.Time) {
	c.rescan(now)
	s.logger.Debug("manifest directory to be scanned once quiet", zap.String("why", why), zap.Strings("files", names))
}

// jitter returns d ±10%.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64())) //nolint:gosec // G404: retry jitter
}

// debounce is the quiet period (see changes).
type debounce struct {
	delay time.Duration // quiet time after the last event
	max   time.Duration // at most this long after the first event
}
