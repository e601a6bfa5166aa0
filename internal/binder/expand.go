package binder

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// resizeStatus says why a bound claim does not have the size it asks for.
type resizeStatus struct {
	why string
	// refused: it will not get it (not: it is being expanded).
	refused bool
}

// expandOp asks the driver to grow the storage of pv with the named
// provisioner to size (provisioner.Expander).
type expandOp struct {
	provisioner string
	pv          *v1.PersistentVolume
	size        resource.Quantity
}

// expand grows the provisioned PersistentVolumes whose claim asks for more
// storage than they have, as the external resizer and the kubelet would
// together: the size is recorded first (the record's ExpandTo), then the
// provisioner grows the storage online (an expandOp, made again after a
// restart until it succeeds: it is idempotent), and the next pass records
// the PersistentVolume's new capacity. A claim that asks for less than its
// PersistentVolume has, or whose class does not allow expansion, keeps its
// size, and resizing says why.
func (o *outcome) expand(w world) {
	o.recordExpanded(w)
	for _, c := range w.claims {
		r, ok := o.recs.bound(keyOf(c))
		if !ok || r.Provisioned == nil {
			continue
		}
		if why := o.resize(w, c, r); why != "" {
			o.resizing[keyOf(c)] = resizeStatus{why: why, refused: true}
		}
	}
	for _, r := range o.recs.sorted() {
		size, ok := r.expandTo()
		if !ok || r.Phase != PhaseBound {
			continue
		}
		o.expansions = append(o.expansions, expandOp{provisioner: r.provisionedBy(), pv: r.Provisioned, size: size})
		have := capacityOf(r.Provisioned)
		why := fmt.Sprintf("expanding PersistentVolume %q from %s to %s", r.PV, have.String(), size.String())
		if err := w.ops.failed[r.PV]; err != "" {
			why += ": failed, retrying: " + err
		}
		if _, ok := o.resizing[r.claim()]; !ok {
			o.resizing[r.claim()] = resizeStatus{why: why}
		}
	}
}

// recordExpanded records the capacity of every PersistentVolume whose
// storage was grown to the size its record asks for.
func (o *outcome) recordExpanded(w world) {
	for name, size := range w.ops.expanded {
		r, ok := o.recs[name]
		if !ok || r.ExpandTo == "" || r.ExpandTo != size {
			continue
		}
		q, _ := r.expandTo()
		pv := r.Provisioned.DeepCopy()
		if pv.Spec.Capacity == nil {
			pv.Spec.Capacity = v1.ResourceList{}
		}
		pv.Spec.Capacity[v1.ResourceStorage] = q
		r.Provisioned, r.ExpandTo = pv, ""
		o.recs[name] = r
		o.events = append(o.events, event{msg: "PersistentVolume expanded to " + size, claim: r.claim(), pv: name})
	}
}

// resize records an expansion of r for claim c when it asks for more than
// r's PersistentVolume has or is growing to, and says why not when it
// cannot have it.
func (o *outcome) resize(w world, c *v1.PersistentVolumeClaim, r record) string {
	want, ok := c.Spec.Resources.Requests[v1.ResourceStorage]
	if !ok {
		return ""
	}
	have := capacityOf(r.Provisioned)
	target, expanding := r.expandTo()
	if !expanding {
		target = have
	}
	switch cmp := want.Cmp(target); {
	case cmp == 0:
		return ""
	case cmp < 0 && want.Cmp(have) < 0:
		return fmt.Sprintf("spec.resources.requests.storage %s is below the capacity %s of PersistentVolume %q: a volume only grows, so the claim keeps %s",
			want.String(), have.String(), r.PV, have.String())
	case cmp < 0:
		return fmt.Sprintf("spec.resources.requests.storage %s is below the size %s PersistentVolume %q is being expanded to: a volume only grows",
			want.String(), target.String(), r.PV)
	}
	className := r.Provisioned.Spec.StorageClassName
	class, ok := w.classes[className]
	switch {
	case !ok:
		return fmt.Sprintf("spec.resources.requests.storage %s is above the capacity %s of PersistentVolume %q, and its StorageClass %q does not exist to allow expansion; the claim keeps %s",
			want.String(), have.String(), r.PV, className, have.String())
	case class.AllowVolumeExpansion == nil || !*class.AllowVolumeExpansion:
		return fmt.Sprintf("spec.resources.requests.storage %s is above the capacity %s of PersistentVolume %q, and its StorageClass %q does not allow volume expansion (allowVolumeExpansion); the claim keeps %s",
			want.String(), have.String(), r.PV, className, have.String())
	case !w.expanders[r.provisionedBy()]:
		return fmt.Sprintf("spec.resources.requests.storage %s is above the capacity %s of PersistentVolume %q, and its provisioner %q cannot expand volumes; the claim keeps %s",
			want.String(), have.String(), r.PV, r.provisionedBy(), have.String())
	}
	r.ExpandTo = want.String()
	o.recs[r.PV] = r
	o.events = append(o.events, event{msg: "claim expansion to " + r.ExpandTo + " recorded", claim: r.claim(), pv: r.PV})
	return ""
}

// expandTo is the size r's PersistentVolume is being grown to, if it is.
func (r record) expandTo() (resource.Quantity, bool) {
	if r.ExpandTo == "" {
		return resource.Quantity{}, false
	}
	q, err := resource.ParseQuantity(r.ExpandTo)
	return q, err == nil
}

func capacityOf(pv *v1.PersistentVolume) resource.Quantity {
	return pv.Spec.Capacity[v1.ResourceStorage]
}

// resizingView gives the view of a claim whose PersistentVolume is being
// expanded what the external resizer would: the size allocated, and the
// condition Resizing until the capacity is recorded.
func resizingView(view *v1.PersistentVolumeClaim, r record) {
	size, ok := r.expandTo()
	if !ok {
		return
	}
	view.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: size}
	view.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimControllerResizeInProgress}
	view.Status.Conditions = append(view.Status.Conditions, v1.PersistentVolumeClaimCondition{
		Type: v1.PersistentVolumeClaimResizing, Status: v1.ConditionTrue,
		Message: fmt.Sprintf("expanding PersistentVolume %q to %s", r.PV, r.ExpandTo),
	})
}
