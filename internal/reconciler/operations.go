package reconciler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/executor"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/subpath"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// key serialises operations: one at a time per volume of a pod, and one per
// pod directory.
func (a action) key() string { return string(a.pod) + "/" + a.volume }

// generation tells the executor what is being attempted: a set-up of a new
// content version is tried at once even while an older one backs off.
func (a action) generation() string {
	switch a.kind {
	case opSetUp, opRefresh:
		return a.plugin + "@" + a.desired.Version
	}
	return string(a.kind)
}

func (a action) dsKey() dsw.Key { return dsw.Key{PodUID: a.pod, Volume: a.volume} }

// operation returns the executor operation that carries out a.
func (r *Reconciler) operation(a action) executor.Op {
	switch a.kind {
	case opTearDown:
		return r.tearDown(a)
	case opCleanup:
		return r.cleanup(a)
	}
	return r.setUp(a)
}

// stale reports whether the actual state of a's volume changed since the
// pass that planned a took its snapshot. Only operations on the same key
// change it, and the executor runs those one at a time, so a change means
// one completed between the snapshot and the start of a: a repeats or
// contradicts it and is skipped. That completion already asked for a pass.
func (r *Reconciler) stale(a action) bool {
	cur, _ := r.cfg.Actual.Get(a.dsKey())
	return cur != a.actual
}

// wantedAgain reports whether the pod of the volume a tears down is desired
// again (it came back) since the pass that planned a.
func (r *Reconciler) wantedAgain(a action) bool {
	_, ok := r.cfg.Desired.Pod(a.pod)
	return ok
}

func (r *Reconciler) setUp(a action) executor.Op {
	return func(ctx context.Context) error {
		unlock := r.pods.rlock(a.pod)
		defer unlock()
		log := r.volumeLogger(a)
		if r.stale(a) {
			log.Debug("skipping an operation planned on a stale snapshot", zap.String("operation", string(a.kind)))
			return nil
		}
		plugin, ok := r.cfg.Plugins.Get(a.plugin)
		if !ok {
			return fmt.Errorf("plugin %s is not registered", a.plugin)
		}
		dir := r.cfg.Root.VolumeDir(a.pod, a.plugin, a.volume)
		if a.desired.Block {
			dir = r.cfg.Root.DevicePath(a.pod, a.plugin, a.volume)
		}
		// A set-up makes the pod's directory, and one that fails may leave
		// it behind (an NFS mount refused by the server leaves the
		// directories above its mount point): it is known before it
		// exists, so that the pod's leaving the desired state removes it,
		// and its source is recorded on disk before it exists, so that
		// after a restart only that source's evidence removes it.
		if err := r.recordPod(a); err != nil {
			r.cfg.Desired.SetError(a.dsKey(), err.Error())
			return err
		}
		start := time.Now()
		stop := progress(log, string(a.kind), r.cfg.ProgressEvery)
		res, err := setUpOrMap(ctx, plugin, a.desired, dir)
		stop()
		err = mount.OneLine(err)
		var subPaths *subpath.Outcome
		var subErr error
		if err == nil {
			subPaths, subErr = r.prepareSubPaths(ctx, a, res.Path)
		}
		took := r.observe(a, start, cmp.Or(err, subErr))
		if err != nil {
			r.setUpFailed(a, dir, err)
			r.cfg.Recorder.SetUpFailed(a.desired.Spec, err)
			logSetUpFailed(log, a, took, err)
			return err
		}
		r.cfg.Actual.Set(asw.Volume{PodUID: a.pod, Name: a.volume, Plugin: a.plugin, Dir: dir, Path: res.Path, State: asw.Mounted, Block: a.desired.Block,
			Access: access(a.desired), Version: a.desired.Version, SpecName: a.desired.SpecName, PV: a.desired.PV, Swap: r.swap(a, res.Swap), SubPaths: subPaths})
		logSubPaths(log, a.desired.SubPaths, subPaths)
		if subErr != nil {
			// The volume is set up; the containers whose subPath
			// failed cannot start. Tried again with backoff.
			subErr = mount.OneLine(subErr)
			r.cfg.Desired.SetError(a.dsKey(), subErr.Error())
			r.cfg.Recorder.SetUpFailed(a.desired.Spec, subErr)
			return subErr
		}
		r.cfg.Desired.SetError(a.dsKey(), "")
		if a.kind == opSetUp && !a.actual.Reconstructed {
			r.recordSetUp(a)
		}
		logSetUp(log, a, took, res.Path)
		return nil
	}
}

// setUpOrMap sets d up in dir, or for a volume of volumeMode Block
// publishes its device at dir.
func setUpOrMap(ctx context.Context, plugin volume.Plugin, d dsw.Volume, dir string) (volume.Result, error) {
	if !d.Block {
		return plugin.SetUp(ctx, d.Spec, dir)
	}
	m, ok := plugin.(volume.BlockMapper)
	if !ok {
		return volume.Result{}, fmt.Errorf("plugin %s does not serve volumeMode Block", plugin.Name())
	}
	return m.MapDevice(ctx, d.Spec, dir)
}

// tearDownOrUnmap tears a down, or takes off its published device.
func tearDownOrUnmap(ctx context.Context, plugin volume.Plugin, a asw.Volume) error {
	if !a.Block {
		return plugin.TearDown(ctx, a.Dir)
	}
	m, ok := plugin.(volume.BlockMapper)
	if !ok {
		return fmt.Errorf("plugin %s does not serve volumeMode Block: leaving the device published at %s", plugin.Name(), a.Dir)
	}
	return m.UnmapDevice(ctx, a.Dir)
}

// swap is what is known about the swap of a's volume after a set-up that
// reported got: a set-up that mounted nothing (the tmpfs was there
// already) leaves what was known before.
func (r *Reconciler) swap(a action, got volume.Swap) volume.Swap {
	if got != volume.SwapUnknown {
		return got
	}
	prev, _ := r.cfg.Actual.Get(a.dsKey())
	return prev.Swap
}

// logSetUpFailed logs a failed set-up or refresh at warn level: the volume
// is not (or no longer) what its pod needs until someone acts.
func logSetUpFailed(log *zap.Logger, a action, took time.Duration, err error) {
	fields := []zap.Field{zap.String("operation", string(a.kind)), zap.Duration("duration", took), zap.Error(err)}
	if a.kind == opRefresh {
		log.Warn("volume refresh failed; the volume keeps its old content", fields...)
		return
	}
	log.Warn("volume set-up failed", fields...)
}

// logSetUp logs a set-up or refresh that succeeded; a volume found on disk
// at start and set up again (which remounts and rewrites nothing that is
// right) says so with reconstructed=true.
func logSetUp(log *zap.Logger, a action, took time.Duration, path string) {
	fields := []zap.Field{zap.String("operation", string(a.kind)), zap.String("path", path), zap.Duration("duration", took)}
	switch {
	case a.kind == opRefresh:
		log.Info("volume refreshed", fields...)
	case a.actual.Reconstructed:
		log.Info("volume set up", append(fields, zap.Bool("reconstructed", true))...)
	default:
		log.Info("volume set up", fields...)
	}
}

// setUpFailed records a failed set-up. A volume whose set-up timed out may
// be half set up: it becomes Uncertain so that it is either set up again or
// torn down. A failed refresh leaves the volume Mounted with its old content.
func (r *Reconciler) setUpFailed(a action, dir string, err error) {
	r.cfg.Desired.SetError(a.dsKey(), err.Error())
	if !errors.Is(err, context.DeadlineExceeded) {
		return
	}
	prev, ok := r.cfg.Actual.Get(a.dsKey())
	if ok && prev.State == asw.Mounted {
		return
	}
	r.cfg.Actual.Set(asw.Volume{PodUID: a.pod, Name: a.volume, Plugin: a.plugin, Dir: dir, Path: dir, State: asw.Uncertain, Block: a.desired.Block,
		Access: access(a.desired), SpecName: a.desired.SpecName, PV: a.desired.PV, Swap: prev.Swap})
}

// access is how a set-up of d mounts it: as d asks, the plugin's options
// putting readOnly last. A set-up never runs on a mount known to be the
// other way (plan.setups), and one found without a mount it mounts itself.
// A published device's access is not a mount's: unknown.
func access(d dsw.Volume) asw.Access {
	if d.Block {
		return asw.AccessUnknown
	}
	return asw.AccessOf(d.ReadOnly)
}

func (r *Reconciler) tearDown(a action) executor.Op {
	return func(ctx context.Context) error {
		torn, err := r.tearDownVolume(ctx, a)
		if err != nil || !torn {
			return err
		}
		// The pod's last volume is gone: its directory goes now, in this
		// operation's turn, rather than behind every operation queued
		// since (a planned cleanup would wait for them all). A failure is
		// recorded by cleanup and retried by the planned one.
		if _, ok := r.cfg.Actual.PodDir(a.pod); ok && !r.podInUse(a) {
			_ = r.cleanup(action{kind: opCleanup, pod: a.pod, podNamespace: a.podNamespace, podName: a.podName})(ctx)
		}
		return nil
	}
}

// tearDownVolume tears down a's volume and reports whether it did (not
// when a was planned on a stale snapshot or its pod is wanted again).
func (r *Reconciler) tearDownVolume(ctx context.Context, a action) (bool, error) {
	log := r.volumeLogger(a)
	// The pod's subPath mounts show its volumes' content: they go
	// first, under the pod's lock alone.
	if err := r.removeSubPaths(ctx, a); err != nil {
		r.cfg.Actual.SetTearDownError(a.dsKey(), err.Error())
		log.Warn("volume teardown failed", zap.Error(err))
		return false, err
	}
	unlock := r.pods.rlock(a.pod)
	defer unlock()
	if r.stale(a) || r.wantedAgain(a) {
		log.Debug("skipping an operation planned on a stale snapshot", zap.String("operation", string(a.kind)))
		return false, nil
	}
	plugin, ok := r.cfg.Plugins.Get(a.plugin)
	if !ok {
		return false, fmt.Errorf("plugin %s is not registered", a.plugin)
	}
	start := time.Now()
	stop := progress(log, string(a.kind), r.cfg.ProgressEvery)
	err := mount.OneLine(tearDownOrUnmap(ctx, plugin, a.actual))
	stop()
	took := r.observe(a, start, err)
	if err != nil {
		// Kept in the actual state: the status shows the pod
		// Terminating with this reason until a teardown succeeds.
		r.cfg.Actual.SetTearDownError(a.dsKey(), err.Error())
		log.Warn("volume teardown failed", zap.Duration("duration", took), zap.Error(err))
		return false, err
	}
	r.cfg.Actual.Delete(a.dsKey())
	log.Info("volume torn down", zap.Duration("duration", took))
	return true, nil
}

// observe records the outcome of a, begun at start, and returns its
// duration.
func (r *Reconciler) observe(a action, start time.Time, err error) time.Duration {
	outcome := "success"
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		outcome = "timeout"
	case err != nil:
		outcome = "error"
	}
	took := time.Since(start)
	r.cfg.Observer.ObserveOperation(a.plugin, string(a.kind), outcome, took)
	return took
}

// volumeLogger returns the logger of a's volume: its pod by namespace/name
// (when known) and UID, the volume by its name in the pod's spec (its
// directory's name for a volume found on disk at start and not set up
// since), the PersistentVolume of a claim's volume, and the plugin.
func (r *Reconciler) volumeLogger(a action) *zap.Logger {
	name, pv := cmp.Or(a.actual.SpecName, a.volume), a.actual.PV
	if a.kind == opSetUp || a.kind == opRefresh {
		name, pv = cmp.Or(a.desired.SpecName, a.volume), a.desired.PV
	}
	fields := append(podFields(a), zap.String("volume", name))
	if pv != "" {
		fields = append(fields, zap.String("pv", pv))
	}
	// WithLazy: the fields are encoded only if a line is logged, and most
	// operations log none at the default level.
	return r.log.WithLazy(append(fields, zap.String("plugin", a.plugin))...)
}

// podFields name a's pod: "pod" (namespace/name) when known, and "podUID".
func podFields(a action) []zap.Field {
	uid := zap.String("podUID", string(a.pod))
	if a.podName == "" {
		return []zap.Field{uid}
	}
	return []zap.Field{zap.String("pod", a.podNamespace+"/"+a.podName), uid}
}
