package nfssubdir

import (
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// annRecent marks the PVs with which recentVolumes stand for volumes
// whose PV the caller does not list yet; it is never written anywhere.
const annRecent = "volume-agent.io/nfs-subdir-recent"

// recentVolumes are the subdirectories this process provisioned, by PV
// name, until a caller's list of PVs shows their PV, or their PV is
// committed (it exists: the caller lists it from then on), abandoned or
// deleted. Two Provision calls
// whose paths meet can run one after the other before the caller has
// recorded the first one's PV (the binder starts every provisioning of a
// pass at once); the second must still see the first, or it would make
// its volume inside the other's, or around it.
type recentVolumes struct {
	mu   sync.Mutex
	vols map[string]*v1.NFSVolumeSource
}

// add remembers the volume made for the PV named pv.
func (r *recentVolumes) add(pv string, src *v1.NFSVolumeSource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.vols == nil {
		r.vols = map[string]*v1.NFSVolumeSource{}
	}
	r.vols[pv] = src
}

// forget drops the PV named pv: its storage is gone.
func (r *recentVolumes) forget(pv string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.vols, pv)
}

// with returns pvs and, after them, a PV for each remembered volume that
// pvs does not list; those pvs lists are forgotten, as the caller's list
// shows them from now on. A nil pvs (a caller that lists none) forgets
// nothing.
func (r *recentVolumes) with(pvs []*v1.PersistentVolume) []*v1.PersistentVolume {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.vols) == 0 {
		return pvs
	}
	out := slices.Clone(pvs)
	for name, src := range r.vols {
		if slices.ContainsFunc(pvs, func(pv *v1.PersistentVolume) bool { return pv.Name == name }) {
			delete(r.vols, name)
			continue
		}
		out = append(out, &v1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annRecent: "true"}},
			Spec:       v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{NFS: src}},
		})
	}
	return out
}
