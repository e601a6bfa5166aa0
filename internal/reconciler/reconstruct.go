package reconciler

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/layout"
)

// reconstruct rebuilds the actual state from the pod directories on disk.
// Every volume found is Uncertain: it is set up again if still wanted (which
// neither remounts nor rewrites what is right) and torn down otherwise, but
// only after every source has delivered its complete state. Volumes of
// plugins this agent does not know are left alone.
func (r *Reconciler) reconstruct() error {
	pods, found, err := r.cfg.Root.Scan()
	if err != nil {
		return fmt.Errorf("reconstruct actual state: %w", err)
	}
	for _, uid := range pods {
		r.cfg.Actual.AddPodDir(uid, true)
	}
	for _, f := range found {
		r.addFound(f)
	}
	r.log.Info("actual state reconstructed", zap.Int("pods", len(pods)), zap.Int("volumes", len(found)))
	return nil
}

func (r *Reconciler) addFound(f layout.Found) {
	log := r.log.With(zap.String("podUID", string(f.PodUID)), zap.String("volume", f.Volume), zap.String("plugin", f.Plugin))
	if _, ok := r.cfg.Plugins.Get(f.Plugin); !ok {
		log.Warn("leaving volume of an unknown plugin alone", zap.String("dir", f.Dir))
		return
	}
	r.cfg.Actual.Set(asw.Volume{PodUID: f.PodUID, Name: f.Volume, Plugin: f.Plugin, Dir: f.Dir, Path: f.Dir, State: asw.Uncertain, Reconstructed: true})
	log.Debug("volume found on disk")
}
