package reconciler

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/executor"
	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/volume"
	"github.com/volume-agent/volume-agent/internal/wakeup"
)

// Plugins finds a plugin by name, and lists them all.
type Plugins interface {
	Get(name string) (volume.Plugin, bool)
	All() []volume.Plugin
}

// Recorder reports set-up outcomes on the pod (Kubernetes events).
type Recorder interface {
	SetUpSucceeded(spec *volume.Spec)
	SetUpFailed(spec *volume.Spec, err error)
}

// Observer records the outcome of operations (metrics).
type Observer interface {
	ObserveOperation(plugin, operation, outcome string, d time.Duration)
}

// Defaults for Config.
const (
	DefaultResync        = 2 * time.Minute
	DefaultCheckPeriod   = 30 * time.Second
	DefaultShutdownGrace = 5 * time.Second
)

// Config configures a Reconciler.
type Config struct {
	Desired *dsw.World
	Actual  *asw.World
	Plugins Plugins
	Root    layout.Root
	Logger  *zap.Logger
	// Observer may be nil.
	Observer Observer
	// Recorder may be nil.
	Recorder Recorder
	// Executor tuning; OnDone is set by the reconciler.
	Executor executor.Config
	// Resync is the safety-net pass period (2 min, jittered ±10%).
	Resync time.Duration
	// CheckPeriod is how often mounted volumes whose plugin is a
	// volume.Checker (network file systems) are checked for a dead server
	// (30 s, jittered ±10%): nothing else would tell.
	CheckPeriod time.Duration
	// ShutdownGrace bounds how long running operations may finish after
	// the context ends (5 s); the process exits at the latest 8 s after
	// SIGTERM, whatever storage does.
	ShutdownGrace time.Duration
	// ProgressEvery is how often a set-up or teardown still running logs
	// so (10 s).
	ProgressEvery time.Duration
	// OnRecovered, when set, is called once the actual state has been
	// rebuilt from disk (the populator looks again: what it keeps depends
	// on what is set up).
	OnRecovered func()
	// MountedNoSwap, when set, reads the mount table once at start and
	// reports for each tmpfs at or below a directory whether it has
	// noswap (mount.NoSwapUnder): volumes found on disk then say whether
	// they may reach swap. Nil: unknown.
	MountedNoSwap func(ctx context.Context, dir string) (map[string]bool, error)
	// MountedReadOnly, when set, reads the mount table once at start and
	// reports for each of some directories that is a mount point whether
	// its mount is read-only (mount.ReadOnlyMounts): volumes found on disk
	// then say how they are mounted (asw.Volume.Access), which a running
	// pod's volume keeps whatever its spec says since. An error fails the
	// reconstruction: a set-up of a volume whose mount is not known would
	// show it as the spec asks. Nil: not known (an agent that mounts
	// nothing).
	MountedReadOnly func(ctx context.Context, dirs []string) (map[string]bool, error)
	// SubPaths, when set, prepares the subPath mounts of the pods'
	// containers once their volumes are set up, and takes them off before
	// the volumes are torn down. Nil: none are prepared.
	SubPaths SubPaths
}

// Reconciler runs reconcile passes. Create with New, start with Run.
type Reconciler struct {
	cfg  Config
	log  *zap.Logger
	exec *executor.Executor
	wake *wakeup.Signal
	pods podLocks
	// beforeRecord, when set by a test, is called before each write of
	// a pod's record.
	beforeRecord func(types.UID)
	// recording serialises, per pod, the writing of its record and the
	// making of its directories (recordPod).
	recording podLocks
	recovered atomic.Bool
	// foundAtStart holds the UIDs of the pod directories found on disk
	// at start, one entry each, never changed once reconstruct has set
	// it: their set-ups always prepare subPaths (a crash may have left
	// mounts no outcome records).
	foundAtStart atomic.Pointer[map[types.UID]bool]
	// passes is what a pass carries to the next; only Run's goroutine
	// uses it.
	passes passState
	// swept is set once the plugins' shared mounts have been swept after
	// start; only Run's goroutine uses it.
	swept bool
	// ended holds the pods an operation of which ended, or whose backoff
	// expired, since the last pass: the next pass looks at them again.
	endedMu sync.Mutex
	ended   map[types.UID]bool // guarded by endedMu
	// subPathPods are the pods that may have subPath mounts the actual
	// state does not show (see subPathsMayExist).
	subPathPods *subPathPods
}

// New returns a reconciler; it starts nothing.
func New(cfg Config) *Reconciler {
	if cfg.Resync == 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.CheckPeriod == 0 {
		cfg.CheckPeriod = DefaultCheckPeriod
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	if cfg.ProgressEvery == 0 {
		cfg.ProgressEvery = progressEvery
	}
	if cfg.Recorder == nil {
		cfg.Recorder = nopRecorder{}
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	spp := &subPathPods{}
	if cfg.SubPaths != nil {
		cfg.SubPaths = notingSubPaths{SubPaths: cfg.SubPaths, pods: spp}
	}
	r := &Reconciler{cfg: cfg, log: cfg.Logger.Named("reconciler"), wake: wakeup.New("reconciler"),
		passes: passState{desired: cfg.Desired.Watch(), actual: cfg.Actual.Watch()}, ended: map[types.UID]bool{}, subPathPods: spp}
	cfg.Executor.OnDone = r.opEnded
	r.exec = executor.New(cfg.Executor)
	return r
}

// Notify asks for a pass soon. It never blocks.
func (r *Reconciler) Notify() { r.wake.Notify() }

// opEnded records that the operation on key ("podUID/volume", "podUID/")
// ended or its backoff expired, and asks for a pass, which looks at the
// pod again. It never blocks.
func (r *Reconciler) opEnded(key string) {
	uid, _, _ := strings.Cut(key, "/")
	r.endedMu.Lock()
	r.ended[types.UID(uid)] = true
	r.endedMu.Unlock()
	r.Notify()
}

// takeEnded returns the pods recorded by opEnded since the last call.
func (r *Reconciler) takeEnded() map[types.UID]bool {
	r.endedMu.Lock()
	defer r.endedMu.Unlock()
	ended := r.ended
	r.ended = map[types.UID]bool{}
	return ended
}

// Stuck returns an error when a pass has been pending for longer than limit.
func (r *Reconciler) Stuck(limit time.Duration) error { return r.wake.Stuck(limit) }

// Recovered reports whether the actual state has been rebuilt from disk.
func (r *Reconciler) Recovered() bool { return r.recovered.Load() }

// Run rebuilds the actual state from disk, then reconciles until ctx ends.
// It then lets running operations finish (up to ShutdownGrace) and returns
// nil; it starts no operation once ctx has ended.
func (r *Reconciler) Run(ctx context.Context) error {
	if err := r.reconstruct(ctx); err != nil {
		if ctx.Err() != nil {
			// Stopped while reading what is on disk: nothing was
			// started or changed, and the next start reads it all
			// again. A stop asked for is no failure.
			return nil
		}
		return err
	}
	r.recovered.Store(true)
	if r.cfg.OnRecovered != nil {
		r.cfg.OnRecovered()
	}
	timer := time.NewTimer(jitter(r.cfg.Resync))
	defer timer.Stop()
	check := time.NewTimer(jitter(r.cfg.CheckPeriod))
	defer check.Stop()
	// ctx is checked before every pass: when a wake-up and the end of ctx
	// arrive together, select may pick the wake-up. The first pass and
	// those of the resync timer look at every pod; the others at what
	// changed (see planPass).
	full := true
	for ctx.Err() == nil {
		r.wake.Taken()
		r.reconcile(full)
		full = false
		select {
		case <-ctx.Done():
		case <-r.wake.C():
		case <-timer.C:
			full = true
			timer.Reset(jitter(r.cfg.Resync))
		case <-check.C:
			r.checkMounted()
			check.Reset(jitter(r.cfg.CheckPeriod))
		}
	}
	return r.shutdown()
}

func (r *Reconciler) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ShutdownGrace)
	defer cancel()
	if err := r.exec.Wait(ctx); err != nil {
		r.log.Info("operations still running at shutdown; their outcome is uncertain", zap.Error(err))
	}
	return nil
}

// reconcile runs one pass; full makes it look at every pod.
func (r *Reconciler) reconcile(full bool) {
	p := r.planPass(full)
	live := map[string]bool{}
	for _, a := range p.actions {
		key := a.key()
		live[key] = true
		r.exec.Start(key, a.generation(), r.operation(a))
	}
	if p.populated && !r.swept {
		r.swept = true
		r.sweep()
	}
	// A key backs off only while its action is planned; the backoffs of
	// pods this pass did not look at stay as they are.
	r.exec.Retain(func(key string) bool { return live[key] || !p.looked(key) })
}

// sweep asks every plugin that shares mounts between volumes to take down
// those no volume uses any more, once after a start, when every source has
// synced: a crash between a teardown and the release of a shared mount
// leaves one behind, and only then is it known which are still wanted.
func (r *Reconciler) sweep() {
	for _, p := range r.cfg.Plugins.All() {
		s, ok := p.(volume.Sweeper)
		if !ok {
			continue
		}
		r.exec.Start("sweep/"+p.Name(), "sweep", func(ctx context.Context) error {
			err := s.Sweep(ctx)
			if err != nil {
				r.log.Warn("sweeping shared mounts failed", zap.String("plugin", p.Name()), zap.Error(mount.OneLine(err)))
			}
			return err
		})
	}
}

func jitter(d time.Duration) time.Duration {
	return d - d/10 + time.Duration(rand.Int64N(int64(d)/5+1)) //nolint:gosec // G404: resync jitter
}

type nopRecorder struct{}

func (nopRecorder) SetUpSucceeded(*volume.Spec)     {}
func (nopRecorder) SetUpFailed(*volume.Spec, error) {}

type nopObserver struct{}

func (nopObserver) ObserveOperation(string, string, string, time.Duration) {}
