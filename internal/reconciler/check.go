package reconciler

import (
	"context"

	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// checkMounted checks every mounted volume whose plugin can tell a dead
// volume from a live one (an NFS mount whose server stopped answering).
// Each check runs as an operation on the volume's own key, so it never
// overlaps a set-up or a teardown of it.
func (r *Reconciler) checkMounted() {
	for _, a := range r.cfg.Actual.Volumes() {
		if a.State != asw.Mounted {
			continue
		}
		plugin, ok := r.cfg.Plugins.Get(a.Plugin)
		if !ok {
			continue
		}
		if c, ok := plugin.(volume.Checker); ok {
			d, _ := r.cfg.Actual.PodDir(a.PodUID)
			act := action{kind: opCheck, pod: a.PodUID, volume: a.Name, plugin: a.Plugin, actual: a, podNamespace: d.Namespace, podName: d.Name}
			r.exec.Start(act.key(), act.generation(), r.check(act, c))
		}
	}
}

// check marks a's volume Uncertain, with the error, when it is dead: the
// next pass sets it up again, with backoff, until it lives.
func (r *Reconciler) check(a action, c volume.Checker) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if r.stale(a) {
			return nil
		}
		err := mount.OneLine(c.Check(ctx, a.actual.Dir))
		if err == nil || r.stale(a) {
			return nil
		}
		dead := a.actual
		dead.State = asw.Uncertain
		r.cfg.Actual.Set(dead)
		r.cfg.Desired.SetError(a.dsKey(), err.Error())
		r.volumeLogger(a).Warn("mounted volume found dead; setting it up again", zap.Error(err))
		return nil
	}
}
