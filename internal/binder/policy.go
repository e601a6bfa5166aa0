package binder

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// AnnReclaimPolicy on a manifest claim sets the reclaim policy of the
// PersistentVolume the binder provisioned for it, as `kubectl patch pv`
// would in a cluster: "Delete" or "Retain". It is the operator's way to
// have a retained volume deleted (add the claim back with it, then delete
// the claim), or to keep one that would be deleted.
const AnnReclaimPolicy = "volume-agent.io/reclaim-policy"

// applyPolicies gives the provisioned PersistentVolume of every Bound
// record the reclaim policy its claim's AnnReclaimPolicy asks for. A value
// other than Delete or Retain, or the annotation on a claim bound to a
// PersistentVolume the binder did not provision, is refused with a reason
// and changes nothing.
func (o *outcome) applyPolicies(w world) {
	for _, c := range w.claims {
		want, ok := c.Annotations[AnnReclaimPolicy]
		if !ok {
			continue
		}
		r, bound := o.recs.bound(keyOf(c))
		policy := v1.PersistentVolumeReclaimPolicy(want)
		switch {
		case !bound:
		case policy != v1.PersistentVolumeReclaimDelete && policy != v1.PersistentVolumeReclaimRetain:
			o.pending[keyOf(c)] = fmt.Sprintf("annotation %s %q: want Delete or Retain; the reclaim policy stays %s", AnnReclaimPolicy, want, r.reclaimPolicy())
		case r.Provisioned == nil:
			o.pending[keyOf(c)] = fmt.Sprintf("annotation %s applies only to a PersistentVolume the agent provisioned; "+
				"PersistentVolume %q of the manifests is always retained: delete its data by hand", AnnReclaimPolicy, r.PV)
		case r.Provisioned.Spec.PersistentVolumeReclaimPolicy != policy:
			pv := r.Provisioned.DeepCopy()
			pv.Spec.PersistentVolumeReclaimPolicy = policy
			r.Provisioned = pv
			o.recs[r.PV] = r
			o.events = append(o.events, event{msg: "reclaim policy set by the claim's annotation: " + want, claim: r.claim(), pv: r.PV})
		}
	}
}
