package binder

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"

	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/source/volumesnapshot"
	"github.com/volume-agent/volume-agent/internal/wakeup"
)

// DefaultSettle is Config.Settle's default: the manifest source's settle
// time, for which content that drops an object must be unchanged before it
// is believed. A config tool's `rm claim.yaml; cp new claim.yaml` is over
// well within it.
const DefaultSettle = 750 * time.Millisecond

// After a failed write of the records, the loop tries again after
// retryMin, doubling up to retryMax, until a write succeeds (every pass
// that changes a record tries too). A minute at most: the cause (a full
// or read-only file system) is one the operator fixes, and the fix is
// then taken up within that minute, not after a restart.
const (
	retryMin = time.Second
	retryMax = time.Minute
)

// Inner is the source a binder wraps: one without a PV controller, that
// lists its PersistentVolumes and claims (the manifest source).
type Inner interface {
	source.Source
	// PersistentVolumes returns every PersistentVolume, sorted by name.
	// The objects are shared, read-only snapshots.
	PersistentVolumes() []*v1.PersistentVolume
	// PersistentVolumeClaims returns every claim, sorted by namespace and
	// name. The objects are shared, read-only snapshots.
	PersistentVolumeClaims() []*v1.PersistentVolumeClaim
	// StorageClasses returns every StorageClass, sorted by name. The
	// objects are shared, read-only snapshots.
	StorageClasses() []*storagev1.StorageClass
	// VolumeSnapshots returns every VolumeSnapshot, sorted by namespace
	// and name, and VolumeSnapshotClasses every VolumeSnapshotClass,
	// sorted by name. The objects are shared, read-only snapshots.
	VolumeSnapshots() []*volumesnapshot.VolumeSnapshot
	VolumeSnapshotClasses() []*volumesnapshot.VolumeSnapshotClass
}

// Config configures a binder Source.
type Config struct {
	// Inner is the wrapped source. Required. Its own OnChange must call
	// Notify, and nothing else: the binder runs a pass, then calls
	// Config.OnChange, so its owner sees the inner source's changes together
	// with the bindings they lead to.
	Inner Inner
	// StatePath is the state file, <root>/claims.json. Required; its
	// directory must exist. A missing file holds no bindings, unless
	// Traces shows there were some.
	StatePath string
	// NodeName is this node's name (--node-name); nodeAffinity is matched
	// against it as kubernetes.io/hostname. Required.
	NodeName string
	// Logger is required; the binder names it "binder".
	Logger *zap.Logger
	// Provisioners provision the claims of the StorageClasses whose
	// provisioner they serve (Name), and delete the storage of the Released
	// PersistentVolumes they made when the reclaim policy is Delete.
	// Optional; nil provisions nothing. Names must be distinct.
	Provisioners []provisioner.Provisioner
	// Snapshotters take the snapshots of the volumes of the provisioners
	// they are keyed by (provisioner.LocalName): VolumeSnapshots, and
	// claims made from a data source, are served only for those.
	// Optional; nil takes no snapshot.
	Snapshotters map[string]Snapshotter
	// PauseAfterStorage, for fault tests only, waits this long between a
	// successful Provision and the result reaching the binding loop (the
	// agent reads it from $VOLUME_AGENT_TEST_PROVISION_PAUSE), so that a
	// test sees a provisioning under way. Zero in production.
	PauseAfterStorage time.Duration
	// ReclaimDelay (--reclaim-delay) is how long the storage of a released
	// claim with reclaim policy Delete stays aside, restorable by the same
	// claim coming back, before it is deleted; and how long a released
	// static PersistentVolume must stay removed from the source before its
	// binding is forgotten. Zero: as soon as the other rules allow.
	ReclaimDelay time.Duration
	// Settle is how long a claim must stay removed from the source before
	// it is released; DefaultSettle when zero.
	Settle time.Duration
	// InUse reports whether a pod on this node has the named
	// PersistentVolume set up (in the actual state, whatever its state),
	// or whether that is not known yet (before the actual state is rebuilt
	// at start). Nothing is released, moved or deleted while it says so;
	// NotifyActual wakes the binder when it may have changed. Optional:
	// nil reports nothing in use (for tests).
	InUse func(pv string) bool
	// Traces, when set, says what on disk shows that claims were bound
	// before (a claim's volume set up for a pod, a provisioned volume): a
	// missing state file with traces is refused, never taken for "no
	// bindings", which would let every claim bind again, perhaps to a
	// PersistentVolume that holds another claim's data. It is called once,
	// by New, and only when the state file is missing.
	Traces func() ([]string, error)
	// OnChange is called after every pass that followed a Notify (the inner
	// source's state, which the binder passes through, may have changed)
	// and after a pass that changed bindings, errors or Status. It runs on
	// the binding loop's goroutine, never under a lock, and may be called
	// spuriously: it should only signal and return. Optional.
	OnChange func()
}

// Source is a source.Source that binds the claims of its inner source to
// PersistentVolumes and serves them as the PV controller would leave them.
// Create it with New.
type Source struct {
	inner    Inner
	nodeName string
	store    store
	onChange func()
	log      *zap.Logger
	wake     *wakeup.Signal
	// retryMin is the first delay before a failed write is tried again.
	retryMin time.Duration
	// running prevents two concurrent calls of Run.
	running atomic.Bool
	settle  time.Duration
	delay   time.Duration
	inUse   func(pv string) bool
	// ops, obs and due are owned by the binding loop: due is when a pass
	// is due by the passing of time alone (zero: never).
	ops *operations
	obs observations
	due time.Time
	// waitsOnUse is set while a decision waits for a PersistentVolume to
	// be torn down (see NotifyActual).
	waitsOnUse atomic.Bool
	// deleteNow takes DeleteNow's requests to the binding loop.
	deleteNow chan deleteNowCall
	// newNonce draws the nonces of claims made for ephemeral volumes;
	// nil: evidence.NewNonce (tests set a predictable one).
	newNonce func() string

	mu sync.Mutex
	st *state // guarded by mu; replaced, never modified
}

// state is what the views are built from.
type state struct {
	// recs are the records as on disk.
	recs records
	// pending says why a claim that a pod uses is not bound.
	pending map[claimKey]string
	// held says why a claim removed from the source is not released.
	held map[claimKey]string
	// resizing says why a bound claim does not have the size it asks for.
	resizing map[claimKey]resizeStatus
	// lost holds the claims whose Bound record names a PersistentVolume
	// that was gone at the last pass, with that PV's name, to log changes;
	// views look the PV up at each call.
	lost map[claimKey]string
	// writeErr says why the last write of the records failed; "" if it did not.
	writeErr string
	// synced is set once a pass ran with the inner source synced.
	synced bool
	// made are the claims made for generic ephemeral volumes, as on disk;
	// listed are those whose pod was in the source at the last pass (the
	// others are being released), sorted by namespace and name.
	made   madeClaims
	listed []*v1.PersistentVolumeClaim
	// refused says, by a claim's "namespace/name", why the template of its
	// ephemeral volume is not made into a claim.
	refused map[string]string
	// snaps are the snapshot records as on disk; snapPending says why a
	// VolumeSnapshot has no snapshot (yet), snapHeld, by handle, why a
	// snapshot whose VolumeSnapshot is gone is not deleted yet.
	snaps       snapRecords
	snapPending map[snapKey]string
	snapHeld    map[string]string
}

func (a *state) equal(b *state) bool {
	return maps.Equal(a.recs, b.recs) && maps.Equal(a.pending, b.pending) && maps.Equal(a.held, b.held) && maps.Equal(a.lost, b.lost) &&
		maps.Equal(a.resizing, b.resizing) && maps.Equal(a.made, b.made) && slices.Equal(a.listed, b.listed) && maps.Equal(a.refused, b.refused) &&
		a.writeErr == b.writeErr && a.synced == b.synced &&
		maps.Equal(a.snaps, b.snaps) && maps.Equal(a.snapPending, b.snapPending) && maps.Equal(a.snapHeld, b.snapHeld)
}

var _ source.Source = (*Source)(nil)

// New validates cfg and reads the state file. It starts nothing. A state
// file that exists but cannot be read or parsed is an error that says how
// to recover; it is never taken for "no bindings".
func New(cfg Config) (*Source, error) {
	if err := validateConfig(cfg); err != nil {
		return nil, err
	}
	st := newStore(cfg.StatePath)
	if err := st.checkMissing(cfg.Traces); err != nil {
		return nil, err
	}
	recs, made, snaps, err := st.loadAll()
	if err != nil {
		return nil, err
	}
	if err := st.removeTemps(); err != nil {
		return nil, fmt.Errorf("binder: %w", err)
	}
	log := cfg.Logger.Named("binder")
	settle := cfg.Settle
	if settle <= 0 {
		settle = DefaultSettle
	}
	return &Source{
		settle:    settle,
		delay:     cfg.ReclaimDelay,
		inUse:     cfg.InUse,
		inner:     cfg.Inner,
		nodeName:  cfg.NodeName,
		store:     st,
		onChange:  cfg.OnChange,
		log:       log,
		wake:      wakeup.New("binder"),
		deleteNow: make(chan deleteNowCall),
		retryMin:  retryMin,
		ops:       newOperations(cfg.Provisioners, cfg.Snapshotters, cfg.PauseAfterStorage, log),
		st:        &state{recs: recs, made: made, snaps: snaps},
	}, nil
}

func validateConfig(cfg Config) error {
	switch {
	case cfg.Inner == nil:
		return errors.New("binder: Inner is required")
	case cfg.StatePath == "":
		return errors.New("binder: StatePath is required")
	case cfg.NodeName == "":
		return errors.New("binder: NodeName is required")
	case cfg.Logger == nil:
		return errors.New("binder: Logger is required")
	case cfg.ReclaimDelay < 0:
		return fmt.Errorf("binder: ReclaimDelay %v is negative", cfg.ReclaimDelay)
	}
	names := map[string]bool{}
	for i, p := range cfg.Provisioners {
		switch {
		case p == nil:
			return fmt.Errorf("binder: Provisioners[%d] is nil", i)
		case names[p.Name()]:
			return fmt.Errorf("binder: two Provisioners are named %q", p.Name())
		}
		names[p.Name()] = true
	}
	for name, s := range cfg.Snapshotters {
		if s == nil {
			return fmt.Errorf("binder: Snapshotters[%q] is nil", name)
		}
	}
	dir := filepath.Dir(cfg.StatePath)
	if info, err := os.Stat(dir); err != nil {
		return fmt.Errorf("binder: state directory: %w", err)
	} else if !info.IsDir() {
		return fmt.Errorf("binder: state directory %s is not a directory", dir)
	}
	return nil
}

// Name returns the inner source's name.
func (s *Source) Name() string { return s.inner.Name() }

// Pods returns the inner source's pods.
func (s *Source) Pods() []*v1.Pod { return s.inner.Pods() }

// Node returns the inner source's Node object.
func (s *Source) Node() *v1.Node { return s.inner.Node() }

// Notify asks the binding loop for a pass. The inner source's OnChange
// must call it. It never blocks.
func (s *Source) Notify() { s.wake.Notify() }

// NotifyActual tells the binder that the actual state changed: a pass
// follows when a decision waits for a volume to be torn down. It never
// blocks, and costs nothing otherwise.
func (s *Source) NotifyActual() {
	if s.waitsOnUse.Load() {
		s.wake.Notify()
	}
}

// Stuck returns an error when a binding pass has been pending for longer
// than limit (for /healthz).
func (s *Source) Stuck(limit time.Duration) error { return s.wake.Stuck(limit) }

// Status is the inner source's status, not synced until a binding pass has
// run after the inner source synced, and with a failed write of the
// records among its errors.
func (s *Source) Status() source.Status {
	st := s.inner.Status()
	cur := s.current()
	if st.Synced && !cur.synced {
		st.Synced = false
		st.Reason = "claims not bound yet"
	}
	if cur.writeErr != "" {
		st.Errors = append(slices.Clone(st.Errors), "claim bindings not recorded: "+cur.writeErr)
	}
	return st
}

// Run runs the inner source and the binding loop until ctx ends, and
// returns once both have returned, and every provisioning operation the
// loop started. It returns the inner source's error.
func (s *Source) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("binder: Run is already running")
	}
	defer s.running.Store(false)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.inner.Run(ctx) })
	g.Go(func() error { s.loop(ctx); return nil })
	return g.Wait()
}

// loop is the one goroutine that writes the records. It runs a pass at
// start, after every Notify, after a failed write once its backoff
// expires, when a storage operation ends, when a failed one may be
// retried, and when a pass is due by the passing of time (a removal that
// has held for the settle time, storage whose reclaim delay has passed);
// nothing else wakes it. It returns once the operations it
// started have returned.
func (s *Source) loop(ctx context.Context) {
	r := retry{min: s.retryMin}
	defer r.stop()
	defer s.ops.stop()
	var due dueTimer
	defer due.stop()
	notified := false
	for {
		s.wake.Taken()
		changed := s.pass(ctx)
		r.update(s.current().writeErr != "")
		due.arm(s.due)
		if (changed || notified) && s.onChange != nil {
			s.onChange()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake.C():
			notified = true
		case <-r.c():
			notified = false
		case <-due.c():
			notified = false
		case res := <-s.ops.done:
			s.ops.finish(res)
			notified = false
		case <-s.ops.retry():
			notified = false
		case call := <-s.deleteNow:
			call.reply <- s.decideDeleteNow(call.req)
			notified = true // the claims changed: tell the owner
		}
	}
}

func (s *Source) current() *state {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// publish makes next the current state and reports whether it changed.
func (s *Source) publish(next *state) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := !s.st.equal(next)
	s.st = next
	return changed
}

// retry is the backoff timer of failed writes.
type retry struct {
	min   time.Duration
	delay time.Duration
	timer *time.Timer
}

// update arms the timer, with a longer delay each time, after a failed
// write, and disarms it after a successful one.
func (r *retry) update(failed bool) {
	if !failed {
		r.stop()
		r.delay = 0
		return
	}
	r.delay = min(max(2*r.delay, r.min), retryMax)
	if r.timer == nil {
		r.timer = time.NewTimer(r.delay)
		return
	}
	r.timer.Reset(r.delay)
}

// c fires when the retry is due; never when the timer is not armed.
func (r *retry) c() <-chan time.Time {
	if r.timer == nil {
		return nil
	}
	return r.timer.C
}

func (r *retry) stop() {
	if r.timer != nil {
		r.timer.Stop()
	}
}

// dueTimer fires at the time a pass is due by the passing of time alone.
type dueTimer struct{ timer *time.Timer }

// arm sets the timer to at, or disarms it when at is zero.
func (d *dueTimer) arm(at time.Time) {
	d.stop()
	if !at.IsZero() {
		d.timer = time.NewTimer(max(time.Until(at), 0))
	}
}

// c fires when the pass is due; never when the timer is not armed.
func (d *dueTimer) c() <-chan time.Time {
	if d.timer == nil {
		return nil
	}
	return d.timer.C
}

func (d *dueTimer) stop() {
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}
