// Package populator fills the desired state of the world from the pod
// sources: for every pod on this node that has not terminated, every volume
// it needs, with the plugin that handles it and its content version.
//
// It is level-triggered: a notification from any source leads to one pass
// over every source's current state (it reads in-memory caches and
// resourceVersions, never volume content). A pass computes again only the
// pods whose object, node or set-up volumes changed, and within a pod only
// the volumes whose objects changed, as their lookups then return other
// objects (cache.go); the first pass and a slow jittered resync compute
// everything, as the safety net. It removes a pod from the desired state
// only when the pod's source is synced and no longer lists it.
package populator

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/evidence"
	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/volume"
	"github.com/volume-agent/volume-agent/internal/wakeup"
)

// Plugins finds the plugin for a pod volume, or for the PersistentVolume
// of a claim.
type Plugins interface {
	Find(v *v1.Volume) (volume.Plugin, error)
	FindPV(pv *v1.PersistentVolume) (volume.Plugin, error)
}

// DefaultResync is the safety-net pass period.
const DefaultResync = time.Minute

// Config configures a Populator.
type Config struct {
	Sources []source.Source
	Desired *dsw.World
	// Actual, when set, tells which volumes are set up, so that a running
	// pod's volumes are never torn down by a change to its spec (see
	// immutable.go).
	Actual  Actual
	Plugins Plugins
	Logger  *zap.Logger
	// Resync is the safety-net pass period (1 min, jittered ±10%).
	Resync time.Duration
	// OnPodGone, when set, is called after a pod left the desired state
	// (e.g. to drop its cached tokens).
	OnPodGone func(uid types.UID)
	// Recorder, when set, reports each new spec problem of a volume once
	// (a FailedMount event): such a volume is never attempted, so no
	// failing operation reports it.
	Recorder Recorder
	// PodDirs, when set, lists the pod directories on disk: those found at
	// start whose pods no source lists are marked removed in the desired
	// state once their source's evidence holds (removal.go), and held
	// until then. Without it, only pods a source listed and dropped are.
	PodDirs PodDirs
	// Settle is how long a source that is not authoritative must have
	// listed objects before a pod found on disk that it does not list
	// counts as removed; evidence.Settle when zero.
	Settle time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// VolatileByPod says that a volatile volume's version (a service
	// account token's) changes only when NotifyPod names its pod: a pass
	// then computes again the volatile volumes of the pods named since the
	// last pass, not of every pod. Full passes still compute every volume,
	// the safety net. Off, every pass computes every volatile volume.
	VolatileByPod bool
}

// Recorder reports volume failures on their pod.
type Recorder interface {
	SetUpFailed(spec *volume.Spec, err error)
}

// Populator keeps the desired state in step with the sources.
type Populator struct {
	cfg    Config
	log    *zap.Logger
	wake   *wakeup.Signal
	passes atomic.Int64

	// mu is held by a pass.
	mu sync.Mutex
	// cache holds what the passes derived from each pod they put in the
	// desired state (see cachedPod).
	cache map[types.UID]*cachedPod // guarded by mu

	// named holds the pods NotifyPod named since the last pass began.
	namedMu sync.Mutex
	named   map[types.UID]bool // guarded by namedMu
}

// New returns a populator; it starts nothing.
func New(cfg Config) *Populator {
	if cfg.Resync == 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.OnPodGone == nil {
		cfg.OnPodGone = func(types.UID) {}
	}
	if cfg.Settle == 0 {
		cfg.Settle = evidence.Settle
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Populator{cfg: cfg, log: cfg.Logger.Named("populator"), wake: wakeup.New("populator"), cache: map[types.UID]*cachedPod{}}
}

// Notify asks for a pass soon. It never blocks.
func (p *Populator) Notify() { p.wake.Notify() }

// NotifyPod asks for a pass soon that computes again the volatile volumes
// of pod uid (see Config.VolatileByPod). It never blocks.
func (p *Populator) NotifyPod(uid types.UID) {
	p.namedMu.Lock()
	if p.named == nil {
		p.named = map[types.UID]bool{}
	}
	p.named[uid] = true
	p.namedMu.Unlock()
	p.wake.Notify()
}

// takeNamed returns the pods NotifyPod named since the last call.
func (p *Populator) takeNamed() map[types.UID]bool {
	p.namedMu.Lock()
	defer p.namedMu.Unlock()
	named := p.named
	p.named = nil
	return named
}

// Stuck returns an error when a pass has been pending for longer than limit.
func (p *Populator) Stuck(limit time.Duration) error { return p.wake.Stuck(limit) }

// Passes returns how many passes have run (for tests and benchmarks).
func (p *Populator) Passes() int64 { return p.passes.Load() }

// Run populates until ctx ends. The first pass and those of the resync
// timer compute every pod again; the others what changed. A pass is also
// due when a pod found on disk may count as removed by the passing of time.
func (p *Populator) Run(ctx context.Context) error {
	timer := time.NewTimer(jitter(p.cfg.Resync))
	defer timer.Stop()
	due := time.NewTimer(time.Hour)
	due.Stop()
	defer due.Stop()
	full := true
	for {
		p.wake.Taken()
		next := p.populate(full)
		full = false
		due.Stop()
		if !next.IsZero() {
			due.Reset(max(time.Until(next), 0))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.wake.C():
		case <-due.C:
		case <-timer.C:
			full = true
			timer.Reset(jitter(p.cfg.Resync))
		}
	}
}

// Populate runs one pass, which computes again only the pods, and the
// volumes within them, whose inputs changed (see cachedPod).
func (p *Populator) Populate() { p.populate(false) }

// PopulateAll runs one pass that computes every pod again, whatever it
// has cached: the safety net.
func (p *Populator) PopulateAll() { p.populate(true) }

// populate runs one pass and returns when a pass is due by the passing of
// time alone (zero: none).
func (p *Populator) populate(full bool) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	round := p.passes.Load() + 1
	synced := map[string]bool{}
	statuses := make([]source.Status, 0, len(p.cfg.Sources))
	allSynced := true
	named := p.takeNamed()
	for _, src := range p.cfg.Sources {
		st := src.Status()
		statuses = append(statuses, st)
		synced[src.Name()] = st.Synced
		allSynced = allSynced && st.Synced
		p.addSource(src, round, full, named)
	}
	p.removeGone(round, synced, full)
	due := p.decideRemovals(statuses, p.cfg.Now())
	if allSynced {
		p.cfg.Desired.MarkPopulated()
	}
	p.passes.Add(1)
	return due
}

// addSource brings the pods src lists up to date; full computes them all
// again, whatever is cached. named are the pods whose volatile volumes may
// have changed (when Config.VolatileByPod).
func (p *Populator) addSource(src source.Source, round int64, full bool, named map[types.UID]bool) {
	in := podInputs{src: src, objects: src.Objects(), node: src.Node()}
	for _, pod := range src.Pods() {
		if source.Terminated(pod) {
			continue
		}
		prev := p.cache[pod.UID]
		if prev != nil && prev.round == round {
			p.log.Info("ignoring pod with a UID already in use", podFields(pod.Namespace, pod.Name, pod.UID)...)
			continue
		}
		if full {
			prev = nil
		}
		in.pod = pod
		in.volatile = !p.cfg.VolatileByPod || named[pod.UID]
		p.cache[pod.UID] = p.syncPod(in, prev, round)
	}
}

// removeGone removes from the desired state the pods that no source listed
// in this pass, when their source is synced: an unsynced source's list may
// be incomplete. A full pass looks for them in the desired state itself,
// another in the cache, which holds every pod the passes put there.
func (p *Populator) removeGone(round int64, synced map[string]bool, full bool) {
	if full {
		for _, pod := range p.cfg.Desired.Pods() {
			p.removeIfGone(pod.UID, pod.Namespace, pod.Name, pod.Source, round, synced)
		}
		return
	}
	for uid, c := range p.cache {
		p.removeIfGone(uid, c.pod.Namespace, c.pod.Name, c.source, round, synced)
	}
}

// removeIfGone removes pod uid of source when this pass did not see it and
// the source is synced.
func (p *Populator) removeIfGone(uid types.UID, namespace, name, source string, round int64, synced map[string]bool) {
	if c := p.cache[uid]; (c != nil && c.round == round) || !synced[source] {
		return
	}
	delete(p.cache, uid)
	p.cfg.Desired.DeletePod(uid)
	p.cfg.OnPodGone(uid)
	p.log.Info("pod removed from desired state", podFields(namespace, name, uid)...)
}

func podFields(namespace, name string, uid types.UID) []zap.Field {
	return []zap.Field{zap.String("pod", namespace+"/"+name), zap.String("podUID", string(uid))}
}

func jitter(d time.Duration) time.Duration {
	return d - d/10 + time.Duration(rand.Int64N(int64(d)/5+1)) //nolint:gosec // G404: resync jitter
}
