package usage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/btrfs"
	"github.com/volume-agent/volume-agent/internal/dsw"
)

// Defaults of Config.
const (
	DefaultPeriod           = time.Minute
	DefaultEntriesPerSecond = 20000
	DefaultCallTimeout      = 10 * time.Second
	DefaultStallTimeout     = 30 * time.Second
	DefaultNestedPeriod     = 2 * time.Second
)

// Targets lists the volumes to measure.
type Targets interface {
	UsageTargets() []Target
}

// Reporter is told when a volume's usage passes its size limit: once per
// crossing, when a measurement above the limit follows one below it (or
// none: the volume's first, including the first after a restart).
type Reporter interface {
	SizeLimitExceeded(Stat)
}

// EnforcementReporter, when the Reporter implements it, is told when a
// volume's qgroup limit is found not enforced (Measurement.NotEnforced):
// once, when a measurement says so after one that did not (or none).
type EnforcementReporter interface {
	LimitNotEnforced(Stat)
}

// Config configures Usage.
type Config struct {
	Targets Targets
	// Period is how often each volume is measured at most. Zero turns
	// walks off: only volumes that are their own file system, and
	// subvolumes measured by their qgroup, are measured, every
	// DefaultPeriod.
	Period time.Duration
	// EntriesPerSecond bounds a walk's pace; default
	// DefaultEntriesPerSecond; negative: no bound (benchmarks).
	EntriesPerSecond int
	// CallTimeout bounds a statfs and the check of what a volume's
	// directory is; default DefaultCallTimeout.
	CallTimeout time.Duration
	// StallTimeout abandons a walk that looked at no entry for that long;
	// default DefaultStallTimeout.
	StallTimeout time.Duration
	// NestedPeriod is how often, between measurements, each volume whose
	// qgroup limit the agent enforces is searched for a subvolume made
	// inside it since (checkNested); default DefaultNestedPeriod.
	NestedPeriod time.Duration
	Logger       *zap.Logger
	// Reporter, when set, is told when a volume passes its size limit; it
	// is called on the measuring goroutine and must not block.
	Reporter Reporter

	// stat replaces statx in walks (tests make a file system hang).
	stat statFn
	// statfs replaces statfs(2) (tests make a file system hang).
	statfs func(path string) (fsSize, error)
	// qgroup replaces btrfs qgroup show (benchmarks count its cost apart).
	qgroup func(ctx context.Context, path string, id uint64) (btrfs.Qgroup, error)
	// enforce replaces btrfs.Tool.Enforce (benchmarks count its cost apart).
	enforce func(ctx context.Context, path string, limit int64) (btrfs.Limits, error)
	// nested replaces btrfs.Nested (tests).
	nested func(path string) (uint64, []uint64, error)
	// sleep and now pace walks; tests replace them.
	sleep func(ctx context.Context, d time.Duration) error
	now   func() time.Time
}

// Usage measures the volumes' usage and keeps the latest measurements.
// Create with New, run with Run.
type Usage struct {
	cfg     Config
	walks   bool
	log     *zap.Logger
	mounts  *mountTable
	changes dsw.Watchers
	notify  chan struct{}
	// epoch and step make the grid the volumes are due on (gridSteps).
	epoch time.Time
	step  time.Duration

	// Counters that tests read: how often Run's timer woke it, workers
	// were started, and volumes' directories checked against their probe.
	wakes, workers, dirChecks atomic.Int64

	mu    sync.Mutex
	slots map[dsw.Key]*slot // guarded by mu
}

// slot is one volume's schedule and latest measurement.
type slot struct {
	target Target
	due    time.Time
	m      Measurement
	have   bool
	// busy is closed when the last call on the volume's storage returns;
	// nil when none is left waiting. A volume is not asked again while
	// one is.
	busy   chan struct{}
	warned bool // a failure was logged: the next one is not
	// notEnforced: the volume's limit was not enforced at the latest
	// measurement (logged once, and when it is again).
	notEnforced string
	// nested are the subvolumes inside the volume that its latest
	// measurement limited (btrfs.Tool.Enforce); nil when its limit is not
	// enforced by the agent (checkNested leaves it alone).
	nested []uint64
	// exceeded: the latest measurement was above the size limit.
	exceeded bool
	// probe is how the volume is measured, once probed; nil until then,
	// and after a failure (probe).
	probe *probed
}

// New returns a Usage; it starts nothing.
func New(cfg Config) *Usage {
	walks := cfg.Period > 0
	if cfg.Period <= 0 {
		cfg.Period = DefaultPeriod
	}
	if cfg.EntriesPerSecond == 0 {
		cfg.EntriesPerSecond = DefaultEntriesPerSecond
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	if cfg.stat == nil {
		cfg.stat = unix.Statx
	}
	if cfg.statfs == nil {
		cfg.statfs = statfs
	}
	if cfg.qgroup == nil {
		cfg.qgroup = btrfs.Tool{Timeout: cfg.CallTimeout}.QgroupOf
	}
	if cfg.enforce == nil {
		cfg.enforce = btrfs.Tool{Timeout: cfg.CallTimeout}.Enforce
	}
	if cfg.NestedPeriod <= 0 {
		cfg.NestedPeriod = DefaultNestedPeriod
	}
	if cfg.nested == nil {
		cfg.nested = btrfs.Nested
	}
	if cfg.sleep == nil {
		cfg.sleep = sleep
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Usage{cfg: cfg, walks: walks, log: cfg.Logger.Named("usage"), notify: make(chan struct{}, 1),
		epoch: time.Now(), step: max(cfg.Period/gridSteps, 1),
		mounts: &mountTable{maxAge: cfg.Period, now: time.Now}, slots: map[dsw.Key]*slot{}}
}

// Notify says the set of volumes may have changed. It never blocks.
func (u *Usage) Notify() {
	select {
	case u.notify <- struct{}{}:
	default:
	}
}

// Watch returns a set fed with the UID of every pod a new measurement of
// whose volumes is recorded from now on.
func (u *Usage) Watch() *dsw.Changes { return u.changes.Watch() }

// Usage returns the latest measurement of a volume.
func (u *Usage) Usage(k dsw.Key) (Measurement, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	s, ok := u.slots[k]
	if !ok || !s.have {
		return Measurement{}, false
	}
	return s.m, true
}

// Stats returns every volume measured, with its latest measurement,
// sorted by pod UID and volume.
func (u *Usage) Stats() []Stat {
	u.mu.Lock()
	out := make([]Stat, 0, len(u.slots))
	for _, s := range u.slots {
		if s.have {
			out = append(out, Stat{Target: s.target, Measurement: s.m})
		}
	}
	u.mu.Unlock()
	slices.SortFunc(out, func(a, b Stat) int {
		return cmp.Or(cmp.Compare(a.Key.PodUID, b.Key.PodUID), cmp.Compare(a.Key.Volume, b.Key.Volume))
	})
	return out
}

// minResync is the least time between two readings of the targets when
// told they changed: a burst of pods starting costs one reading a second,
// not one per pod.
const minResync = time.Second

// gridSteps is how many points of time a period the first measurements
// of new volumes are spread over (no storm of walks at start: a grid of
// Period/gridSteps). From their second, volumes are due at the points
// epoch+k*Period, all together: at rest a node's volumes are measured in
// one pass a period, one wake-up, where each pass costs about 50 of the
// runtime's own (its sysmon thread polls every 20 µs while a goroutine
// runs, up to 50 times before it slows down), whatever its size.
const gridSteps = 6

// Run measures the volumes, in passes of those due at one time, until
// ctx ends. It reads the targets again when told they changed (Notify),
// at most once a minResync, and at least once a period. It wakes for
// nothing else: the search for nested subvolumes every NestedPeriod runs
// only while some volume has a limit the agent enforces. When ctx ends it
// returns at once: a pass's worker then makes no other call and ends
// when its call returns, which a call stuck in the kernel on hung
// storage may never do (it holds only its own goroutine).
func (u *Usage) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	var synced time.Time
	checked := time.Now()
	dirty := true
	for {
		select {
		case <-u.notify:
			dirty = true
		default:
		}
		now := time.Now()
		// A pass takes the targets first when they are half a period
		// old, so that the read of every period needs no wake-up of its
		// own.
		if (dirty && now.Sub(synced) >= minResync) || now.Sub(synced) >= u.cfg.Period ||
			(now.Sub(synced) >= u.cfg.Period/2 && u.untilNext(now) == 0) {
			u.sync(now)
			synced, dirty = now, false
		}
		watching := u.watching()
		if watching && now.Sub(checked) >= u.cfg.NestedPeriod {
			u.checkNested(ctx, now)
			checked = now
		}
		if due := u.due(now); len(due) > 0 {
			u.measure(ctx, due...)
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		wait := min(u.untilNext(now), synced.Add(u.cfg.Period).Sub(now))
		if dirty {
			wait = min(wait, synced.Add(minResync).Sub(now))
		}
		if watching {
			wait = min(wait, checked.Add(u.cfg.NestedPeriod).Sub(now))
		}
		timer.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			return nil
		case <-u.notify:
			dirty = true
		case <-timer.C:
			u.wakes.Add(1)
		}
	}
}

// floor is the point of the grid at or before t.
func (u *Usage) floor(t time.Time) time.Time {
	d := t.Sub(u.epoch)
	q := d / u.step
	if d%u.step < 0 {
		q--
	}
	return u.epoch.Add(q * u.step)
}

// nextPeriod is the first of the points epoch+k*Period at or after t.
func (u *Usage) nextPeriod(t time.Time) time.Time {
	d := t.Sub(u.epoch)
	q := d / u.cfg.Period
	if d%u.cfg.Period > 0 {
		q++
	}
	return u.epoch.Add(q * u.cfg.Period)
}

// ceil is the point of the grid at or after t.
func (u *Usage) ceil(t time.Time) time.Time {
	f := u.floor(t)
	if f.Before(t) {
		f = f.Add(u.step)
	}
	return f
}

// sync takes the targets: a new volume is first measured at one of the
// next gridSteps points of the grid, at random (no storm at start, and
// within a period), a volume gone is forgotten. A volume whose path
// changed is probed again.
func (u *Usage) sync(now time.Time) {
	targets := u.cfg.Targets.UsageTargets()
	u.mu.Lock()
	defer u.mu.Unlock()
	seen := make(map[dsw.Key]bool, len(targets))
	first := u.ceil(now)
	for _, t := range targets {
		seen[t.Key] = true
		if s, ok := u.slots[t.Key]; ok {
			if s.target.Path != t.Path {
				s.probe = nil
			}
			s.target = t
			continue
		}
		u.slots[t.Key] = &slot{target: t, due: first.Add(u.step * time.Duration(rand.N(gridSteps)))} //nolint:gosec // G404: spreading work in time needs no secure randomness
	}
	for k := range u.slots {
		if !seen[k] {
			delete(u.slots, k)
			u.changes.Add(k.PodUID)
		}
	}
}

// due returns the volumes due at now, in the order of their keys, and
// makes each due again at the first point epoch+k*Period a period or more
// after now's point of the grid: a period later for the volumes measured
// at such a point, up to two for a volume measured first at another.
func (u *Usage) due(now time.Time) []*slot {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []*slot
	next := u.nextPeriod(u.floor(now).Add(u.cfg.Period))
	for _, s := range u.slots {
		if !s.due.After(now) {
			s.due = next
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *slot) int {
		return cmp.Or(cmp.Compare(a.target.Key.PodUID, b.target.Key.PodUID), cmp.Compare(a.target.Key.Volume, b.target.Key.Volume))
	})
	return out
}

// untilNext returns how long until the next volume is due (a period when
// there is none).
func (u *Usage) untilNext(now time.Time) time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	d := u.cfg.Period
	for _, s := range u.slots {
		d = min(d, s.due.Sub(now))
	}
	return max(d, 0)
}

// watching reports whether some volume is to be searched for nested
// subvolumes every NestedPeriod (checkNested).
func (u *Usage) watching() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range u.slots {
		if watched(s) {
			return true
		}
	}
	return false
}

// watched reports whether checkNested searches s: a volume whose limit
// its latest measurement enforced, and one with a limit not measured yet
// (its first measurement is up to a Period away). u.mu must be held.
func watched(s *slot) bool {
	return s.nested != nil || (!s.have && s.target.QuotaLimit > 0)
}

// measure measures the volumes in one pass, but those whose last call
// has not returned (the file system still hangs): they are not asked
// again until it does.
func (u *Usage) measure(ctx context.Context, slots ...*slot) {
	jobs := make([]job, 0, len(slots))
	u.mu.Lock()
	for _, s := range slots {
		if idle(s) {
			jobs = append(jobs, u.measureJob(s, s.target))
		}
	}
	u.mu.Unlock()
	u.runPass(ctx, jobs)
}

// measureJob is the job of measuring target t of slot s: a call
// abandoned is recorded as a failed measurement.
func (u *Usage) measureJob(s *slot, t Target) job {
	return job{
		s: s,
		run: func(w *worker) {
			m, ok, err := u.measureTarget(w, s, t)
			if w.isAbandoned() || w.p.ctx.Err() != nil {
				return
			}
			u.report(s, t, m, ok, err)
		},
		abandoned: func(err error) {
			u.forget(s)
			u.record(s, t, Measurement{}, false, err)
		},
	}
}

// report records a measurement and tells the Reporter of a size limit
// passed, or a limit found not enforced.
func (u *Usage) report(s *slot, t Target, m Measurement, ok bool, err error) {
	if err != nil {
		u.forget(s)
	}
	u.mu.Lock()
	wasEnforced := s.notEnforced == ""
	u.mu.Unlock()
	crossed, stat := u.record(s, t, m, ok, err)
	if crossed && u.cfg.Reporter != nil {
		u.cfg.Reporter.SizeLimitExceeded(stat)
	}
	if r, ok := u.cfg.Reporter.(EnforcementReporter); ok && wasEnforced && stat.NotEnforced != "" {
		r.LimitNotEnforced(stat)
	}
}

// record keeps the outcome of a measurement of s and logs a failure; it
// reports whether the volume has just passed its size limit.
func (u *Usage) record(s *slot, t Target, m Measurement, ok bool, err error) (bool, Stat) {
	u.mu.Lock()
	defer u.mu.Unlock()
	log := u.log.With(zap.String("pod", t.Namespace+"/"+t.Pod), zap.String("volume", t.Volume), zap.String("path", t.Path))
	switch {
	case errors.Is(err, unix.ENOENT):
		// Torn down since the targets were read: not a failure.
		log.Debug("volume usage not measured", zap.Error(err))
	case err != nil && !s.warned:
		s.warned = true
		log.Warn("volume usage not measured", zap.Error(err))
	case err != nil:
		log.Debug("volume usage not measured", zap.Error(err))
	case ok:
		if s.warned {
			log.Info("volume usage measured again")
		}
		s.warned = false
		m.Time = time.Now().UTC().Truncate(time.Second)
		// An enforced qgroup limit holds the size limit: nothing to watch,
		// unless the volume counts more than its limit (nested subvolumes
		// written to at once between two measurements, or before their
		// first).
		if m.Method != MethodQuota || m.NotEnforced != "" || m.UsedBytes > m.CapacityBytes {
			m.SizeLimitBytes = t.SizeLimit
			m = m.withSizeLimit()
		}
		u.logEnforcement(log, s, m.NotEnforced)
		s.m, s.have = m, true
		u.changes.Add(t.Key.PodUID)
		crossed := m.Exceeded() && !s.exceeded
		s.exceeded = m.Exceeded()
		return crossed, Stat{Target: t, Measurement: m}
	}
	return false, Stat{}
}

// measureTarget measures the volume t of slot s on the worker w. ok is
// false, with no error, for a volume not measured by choice (walks are
// off, or it is a directory on network storage). A subvolume whose
// qgroup has no limit (or quotas are off) is walked: btrfs qgroup show
// runs again each period, a fork a period for such a volume, cheaper
// than any walk.
func (u *Usage) measureTarget(w *worker, s *slot, t Target) (Measurement, bool, error) {
	path := t.Path
	var notEnforced string
	p, cached, err := u.probe(w, s, path)
	if err != nil {
		return Measurement{}, false, err
	}
	switch p.how {
	case byStatfs:
		size, err := callOn(w, s, u.cfg.CallTimeout, nil, func(context.Context) (fsSize, error) { return u.cfg.statfs(path) })
		if err != nil {
			return Measurement{}, false, err
		}
		if !u.sameFS(s, size.id) && cached {
			// Another file system than the one probed: probe again.
			u.forget(s)
			return u.measureTarget(w, s, t)
		}
		return size.measurement(), true, nil
	case notAtAll:
		return Measurement{}, false, nil
	case byQuota:
		var m Measurement
		var err error
		if t.QuotaLimit > 0 {
			m, err = u.enforced(w, s, t, p.dir.mnt)
		} else {
			m, err = u.quota(w, s, path, p)
		}
		if !errors.Is(err, errNoQuota) {
			return m, err == nil, err
		}
		// Not limited by its qgroup: walked as a plain directory.
		notEnforced = m.NotEnforced
	}
	if !u.walks {
		return Measurement{NotEnforced: notEnforced}, notEnforced != "", nil
	}
	r, err := u.walk(w, s, path)
	if err != nil {
		return Measurement{}, false, err
	}
	return Measurement{CapacityBytes: r.fs.capacity, AvailableBytes: r.fs.available, UsedBytes: r.bytes,
		Inodes: r.fs.inodes, InodesFree: r.fs.inodesFree, InodesUsed: r.inodes, Method: MethodWalk, NotEnforced: notEnforced}, true, nil
}

// enforced measures the subvolume t and the subvolumes inside it by
// their qgroups after making their limits again where they are missing
// or the room they share has changed (btrfs.Tool.Enforce), within
// CallTimeout. Where that fails, the measurement says why (NotEnforced)
// with errNoQuota: the volume is walked, nested subvolumes and all, and
// its size limit watched. mnt is the mount t.Path is on.
func (u *Usage) enforced(w *worker, s *slot, t Target, mnt uint64) (Measurement, error) {
	l, err := callOn(w, s, u.cfg.CallTimeout, nil, func(ctx context.Context) (btrfs.Limits, error) {
		ctx, cancel := context.WithTimeout(ctx, u.cfg.CallTimeout)
		defer cancel()
		return u.cfg.enforce(ctx, t.quotaPath(), t.QuotaLimit)
	})
	if errors.Is(err, errAbandoned) {
		return Measurement{}, err
	}
	u.mu.Lock()
	s.nested = nil
	if err == nil || errors.Is(err, btrfs.ErrTooManyNested) {
		s.nested = append([]uint64{}, l.Nested...)
	}
	u.mu.Unlock()
	switch {
	case errors.Is(err, btrfs.ErrTooManyNested):
		// The first MaxNested are limited and counted; the rest are not.
		size, serr := u.sharedStatfs(w, s, t.Path, mnt)
		if serr != nil {
			return Measurement{}, serr
		}
		m := quotaMeasurement(l.Qgroup, size)
		m.NotEnforced = fmt.Sprintf("%v: those past the first %d are not counted against its limit (delete them)", err, btrfs.MaxNested)
		return m, nil
	case errors.Is(err, btrfs.ErrQuotasOff), errors.Is(err, exec.ErrNotFound):
		return Measurement{NotEnforced: "btrfs quotas are off on the volume's file system: its size is not limited (turn them on: btrfs quota enable <mount point>; the limit is made again at the next measurement)"}, errNoQuota
	case err != nil:
		return Measurement{NotEnforced: fmt.Sprintf("its btrfs qgroup limit could not be made: %v", err)}, errNoQuota
	}
	size, err := u.sharedStatfs(w, s, t.Path, mnt)
	if err != nil {
		return Measurement{}, err
	}
	return quotaMeasurement(l.Qgroup, size), nil
}

// checkNested searches each volume whose limit the agent enforces (or is
// to enforce: not measured yet) for subvolumes inside it (btrfs.Nested: a
// tree search per subvolume, no fork, no walk), in one pass, and makes a
// volume that holds any due at once: a nested subvolume counts against
// the volume from the measurement that limits it, and the room the
// volume's subvolumes share is given out again at each, so the time a pod
// has to write past its limit is about one NestedPeriod, not one Period.
// A volume without nested subvolumes costs one tree search a
// NestedPeriod; one with them, one btrfs qgroup show. A volume whose last
// call has not returned is skipped, as measure skips it.
func (u *Usage) checkNested(ctx context.Context, now time.Time) {
	var jobs []job
	u.mu.Lock()
	for _, s := range u.slots {
		if watched(s) && idle(s) {
			jobs = append(jobs, u.nestedJob(s, s.target.quotaPath(), s.nested, now))
		}
	}
	u.mu.Unlock()
	u.runPass(ctx, jobs)
}

// nestedJob is the job of searching the volume of s, whose subvolume is
// at path and had nested subvolumes known before, for nested ones: the
// volume is due at now when it holds any.
func (u *Usage) nestedJob(s *slot, path string, known []uint64, now time.Time) job {
	return job{s: s, run: func(w *worker) {
		found, err := callOn(w, s, u.cfg.CallTimeout, nil, func(context.Context) ([]uint64, error) {
			_, nested, err := u.cfg.nested(path)
			return nested, err
		})
		if err != nil && !errors.Is(err, btrfs.ErrTooManyNested) {
			return // the measurement says what is wrong
		}
		if len(found) > 0 || len(known) > 0 {
			u.mu.Lock()
			s.due = now
			u.mu.Unlock()
		}
	}}
}

// idle reports whether no call on s's storage is still waiting. u.mu
// must be held.
func idle(s *slot) bool {
	if s.busy == nil {
		return true
	}
	select {
	case <-s.busy:
		return true
	default:
		return false
	}
}

// logEnforcement logs a volume's limit found not enforced, once, and
// enforced again.
func (u *Usage) logEnforcement(log *zap.Logger, s *slot, notEnforced string) {
	switch {
	case notEnforced != "" && s.notEnforced == "":
		log.Warn("volume size limit not enforced", zap.String("reason", notEnforced))
	case notEnforced == "" && s.notEnforced != "":
		log.Info("volume size limit enforced again")
	}
	s.notEnforced = notEnforced
}

// quota measures the subvolume at path, probed as p, by its qgroup, and
// the file system by statfs for what it has free, each within
// CallTimeout.
func (u *Usage) quota(w *worker, s *slot, path string, p probed) (Measurement, error) {
	q, err := callOn(w, s, u.cfg.CallTimeout, nil, func(ctx context.Context) (btrfs.Qgroup, error) {
		ctx, cancel := context.WithTimeout(ctx, u.cfg.CallTimeout)
		defer cancel()
		return limitingQgroup(u.cfg.qgroup(ctx, path, p.subvol))
	})
	if err != nil {
		return Measurement{}, err
	}
	size, err := u.sharedStatfs(w, s, path, p.dir.mnt)
	if err != nil {
		return Measurement{}, err
	}
	return quotaMeasurement(q, size), nil
}

// sharedStatfs is statfs of path, on the mount mnt of a btrfs, read once
// a pass for all the volumes on that mount: what a measurement by qgroup
// takes of it (what is free, the inodes) is the file system's, the same
// from any of its subvolumes (btrfs's statfs leaves qgroups out).
func (u *Usage) sharedStatfs(w *worker, s *slot, path string, mnt uint64) (fsSize, error) {
	p := w.p
	p.mu.Lock()
	size, ok := p.statfs[mnt]
	p.mu.Unlock()
	if ok {
		return size, nil
	}
	size, err := callOn(w, s, u.cfg.CallTimeout, nil, func(context.Context) (fsSize, error) { return u.cfg.statfs(path) })
	if err != nil {
		return fsSize{}, err
	}
	p.mu.Lock()
	p.statfs[mnt] = size
	p.mu.Unlock()
	return size, nil
}

// walk walks path on the worker, abandoned when it looks at no entry for
// StallTimeout: a hung file system cannot hold the other volumes, and a
// large tree can take as long as it needs. The walks of a pass keep to
// EntriesPerSecond together.
func (u *Usage) walk(w *worker, s *slot, path string) (walkResult, error) {
	wk := &walker{stat: u.cfg.stat, pace: w.p.pacer()}
	return callOn(w, s, u.cfg.StallTimeout, &wk.progress, func(ctx context.Context) (walkResult, error) {
		wk.ctx = ctx
		return wk.walk(path)
	})
}
