package populator

import (
	"fmt"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
)

// Actual tells which volumes are set up.
type Actual interface {
	Get(k dsw.Key) (asw.Volume, bool)
}

// keepSetUpVolumes protects the volumes of a running pod from changes to
// its spec. In Kubernetes a pod's volumes cannot change; a manifest can be
// edited — or read half-written. A volume that is set up and disappears
// from the spec, or whose spec now names another plugin, stays as it is,
// with a problem saying why, until the pod goes: tearing it down would
// delete an emptyDir's data on an edit or a partial write.
func (p *Populator) keepSetUpVolumes(d *dsw.Pod) {
	if p.cfg.Actual == nil {
		return
	}
	present := map[string]bool{}
	for i, v := range d.Volumes {
		present[v.Name] = true
		a, ok := p.cfg.Actual.Get(dsw.Key{PodUID: d.UID, Volume: v.Name})
		if ok && v.Plugin != "" && v.Plugin != a.Plugin {
			d.Volumes[i] = dsw.Volume{Name: v.Name, Problem: fmt.Sprintf(
				"volume %q of a running pod changed from %s to %s: a pod's volumes cannot change; the %s volume is kept until the pod is deleted",
				v.Name, a.Plugin, v.Plugin, a.Plugin)}
		}
	}
	prev, ok := p.cfg.Desired.Pod(d.UID)
	if !ok {
		return
	}
	for _, old := range prev.Volumes {
		if present[old.Name] {
			continue
		}
		if _, setUp := p.cfg.Actual.Get(dsw.Key{PodUID: d.UID, Volume: old.Name}); setUp {
			d.Volumes = append(d.Volumes, dsw.Volume{Name: old.Name, Problem: fmt.Sprintf(
				"volume %q was removed from the spec of a running pod: a pod's volumes cannot change; it is kept until the pod is deleted", old.Name)})
		}
	}
}
