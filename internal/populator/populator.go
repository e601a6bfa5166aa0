// Package populator fills the desired state of the world from the pod
// sources: for every pod on this node that has not terminated, every volume
// it needs, with the plugin that handles it and its content version.
//
// It is level-triggered: a notification from any source leads to one full
// pass over every source's current state (cheap: it reads in-memory caches
// and resourceVersions, never volume content). A slow jittered resync is the
// safety net. It removes a pod from the desired state only when the pod's
// source is synced and no longer lists it.
package populator

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
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
}

// New returns a populator; it starts nothing.
func New(cfg Config) *Populator {
	if cfg.Resync == 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.OnPodGone == nil {
		cfg.OnPodGone = func(types.UID) {}
	}
	return &Populator{cfg: cfg, log: cfg.Logger.Named("populator"), wake: wakeup.New("populator")}
}

// Notify asks for a pass soon. It never blocks.
func (p *Populator) Notify() { p.wake.Notify() }

// Stuck returns an error when a pass has been pending for longer than limit.
func (p *Populator) Stuck(limit time.Duration) error { return p.wake.Stuck(limit) }

// Passes returns how many passes have run (for tests and benchmarks).
func (p *Populator) Passes() int64 { return p.passes.Load() }

// Run populates until ctx ends.
func (p *Populator) Run(ctx context.Context) error {
	timer := time.NewTimer(jitter(p.cfg.Resync))
	defer timer.Stop()
	for {
		p.wake.Taken()
		p.Populate()
		select {
		case <-ctx.Done():
			return nil
		case <-p.wake.C():
		case <-timer.C:
			timer.Reset(jitter(p.cfg.Resync))
		}
	}
}

// Populate runs one pass.
func (p *Populator) Populate() {
	ps := pass{seen: map[types.UID]bool{}, setUp: p.setUpVolumes()}
	synced := map[string]bool{}
	allSynced := true
	for _, src := range p.cfg.Sources {
		synced[src.Name()] = src.Status().Synced
		allSynced = allSynced && synced[src.Name()]
		p.addSource(src, &ps)
	}
	for _, pod := range p.cfg.Desired.Pods() {
		if !ps.seen[pod.UID] && synced[pod.Source] {
			p.cfg.Desired.DeletePod(pod.UID)
			p.cfg.OnPodGone(pod.UID)
			p.log.Info("pod removed from desired state", podFields(pod.Namespace, pod.Name, pod.UID)...)
		}
	}
	if allSynced {
		p.cfg.Desired.MarkPopulated()
	}
	p.passes.Add(1)
}

// pass is what one Populate call has seen so far.
type pass struct {
	seen  map[types.UID]bool
	setUp map[types.UID]map[string]asw.Volume // the actual state, by pod
}

func (p *Populator) addSource(src source.Source, ps *pass) {
	node := src.Node()
	for _, pod := range src.Pods() {
		if source.Terminated(pod) {
			continue
		}
		if ps.seen[pod.UID] {
			p.log.Info("ignoring pod with a UID already in use", podFields(pod.Namespace, pod.Name, pod.UID)...)
			continue
		}
		ps.seen[pod.UID] = true
		p.cfg.Desired.SetPod(p.desiredPod(src, pod, node, ps.setUp[pod.UID]))
	}
}

func podFields(namespace, name string, uid types.UID) []zap.Field {
	return []zap.Field{zap.String("pod", namespace+"/"+name), zap.String("podUID", string(uid))}
}

func jitter(d time.Duration) time.Duration {
	return d - d/10 + time.Duration(rand.Int64N(int64(d)/5+1))
}
