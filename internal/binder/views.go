package binder

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/reclaim"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// ClaimStatus is one claim as GET /v1/claims shows it.
type ClaimStatus struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// UID is, on a Released claim, the metadata.uid of the claim that
	// released the storage (none for a manifest claim without one); with
	// PV it names that storage to POST /v1/claims/delete-now, which a new
	// claim of the same name never matches.
	UID   types.UID `json:"uid,omitempty"`
	Phase Phase     `json:"phase"`
	// PV is the PersistentVolume the claim is bound to (or released).
	PV string `json:"pv,omitempty"`
	// Capacity is the capacity of the PersistentVolume the claim is bound
	// to ("" while it is not).
	Capacity string `json:"capacity,omitempty"`
	// ReclaimPolicy is what happens to the PersistentVolume's data once the
	// claim is released: Delete (provisioned with that policy) or Retain
	// (every other PersistentVolume, whatever it says). Empty while the
	// claim is not bound.
	ReclaimPolicy string `json:"reclaimPolicy,omitempty"`
	// PendingDeletion is set on a Released claim whose storage is to be
	// deleted.
	PendingDeletion *PendingDeletion `json:"pendingDeletion,omitempty"`
	// DataSource is what the claim's volume is (to be) made from:
	// "PersistentVolumeClaim <name>" (a clone) or "VolumeSnapshot <name>"
	// (a restore); "" for an empty volume.
	DataSource string `json:"dataSource,omitempty"`
	// Error says why a claim is not bound, or what is wrong with its binding.
	Error string `json:"error,omitempty"`
	// LimitNotEnforced says why the size of the claim's volume, limited
	// by a btrfs qgroup, is not enforced at the latest measurement of a
	// pod's volume of it (limitNotEnforced in /v1/pods); absent while it
	// is, or no pod of this node has it set up.
	LimitNotEnforced string `json:"limitNotEnforced,omitempty"`
}

// PendingDeletion is where the storage of a released claim is on its way to
// deletion (package reclaim).
type PendingDeletion struct {
	// Step is Released (in place: it is moved aside once no pod on this
	// node has it set up), Aside (moved aside, deleted after DeleteAfter
	// unless the claim comes back) or Deleting (being removed or archived;
	// never given back).
	Step string `json:"step"`
	// DeleteAfter is when storage Aside is deleted.
	DeleteAfter *time.Time `json:"deleteAfter,omitempty"`
	// Archive: the deletion archives the storage instead (the class's
	// archiveOnDelete, as recorded on the PersistentVolume).
	Archive bool `json:"archive,omitempty"`
}

// Objects passes ConfigMaps and Secrets through, and returns claims and
// PersistentVolumes as the PV controller would leave them. Lookups read
// the current state at each call; missing objects are the inner source's
// errors (volume.ErrNotFound, or volume.ErrNotReady while it is not synced).
func (s *Source) Objects() volume.Objects { return objects{s: s} }

// Claims returns every claim of the inner source, then the Released
// records and the Bound (or being provisioned) records of claims removed
// from the source, sorted
// by namespace and name (a record after a current claim of the same name).
func (s *Source) Claims() []ClaimStatus {
	st := s.current()
	var out []ClaimStatus
	present := map[claimKey]bool{}
	for _, c := range s.inner.PersistentVolumeClaims() {
		if m, ok := st.made[keyOf(c).String()]; ok {
			out = append(out, ClaimStatus{Namespace: c.Namespace, Name: c.Name, Phase: PhasePending, Error: shadowed(m)})
			continue
		}
		out = append(out, s.claimStatus(c, st))
		present[keyOf(c)] = true
	}
	for _, c := range st.listed {
		out = append(out, s.claimStatus(c, st))
		present[keyOf(c)] = true
	}
	for _, r := range st.recs.sorted() {
		switch {
		case r.Phase == phaseProvisioning && !present[r.claim()]:
			out = append(out, ClaimStatus{Namespace: r.Namespace, Name: r.Name, Phase: PhasePending, PV: r.PV,
				Error: fmt.Sprintf("removed from the manifests while PersistentVolume %q was being provisioned: "+
					"the provisioning is finished, then the PersistentVolume released", r.PV)})
		case r.Phase == phaseProvisioning: // the claim's own status says Pending, and why
		case r.Phase == PhaseReleased:
			out = append(out, ClaimStatus{Namespace: r.Namespace, Name: r.Name, UID: r.UID, Phase: PhaseReleased, PV: r.PV,
				ReclaimPolicy: r.reclaimPolicy(), PendingDeletion: r.pendingDeletion()})
		case !present[r.claim()]:
			out = append(out, ClaimStatus{Namespace: r.Namespace, Name: r.Name, Phase: PhaseBound, PV: r.PV,
				ReclaimPolicy: r.reclaimPolicy(), Error: st.held[r.claim()]})
		}
	}
	slices.SortStableFunc(out, func(a, b ClaimStatus) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

func (s *Source) claimStatus(c *v1.PersistentVolumeClaim, st *state) ClaimStatus {
	view := s.claimView(c, st)
	cs := ClaimStatus{Namespace: c.Namespace, Name: c.Name, Phase: Phase(view.Status.Phase), PV: view.Spec.VolumeName,
		Error: st.pending[keyOf(c)]}
	if ref := dataSourceOf(c); ref != nil {
		cs.DataSource = ref.Kind + " " + ref.Name
	}
	if r, ok := st.recs.bound(keyOf(c)); ok {
		cs.ReclaimPolicy = r.reclaimPolicy()
		cs.DataSource = ""
		if r.Source != nil {
			cs.DataSource = r.Source.Kind + " " + r.Source.Name
		}
	}
	if q, ok := view.Status.Capacity[v1.ResourceStorage]; ok {
		cs.Capacity = q.String()
	}
	if cs.Error == "" {
		cs.Error = st.resizing[keyOf(c)].why
	}
	switch {
	case cs.Phase == PhaseLost:
		cs.Error = fmt.Sprintf("PersistentVolume %q no longer exists; the binding is kept until it is back or the claim is deleted", cs.PV)
	case cs.Phase == PhaseBound && c.Spec.VolumeName != "" && c.Spec.VolumeName != cs.PV:
		cs.Error = fmt.Sprintf("spec.volumeName names %q, but the claim is bound to %q: a binding is never moved; delete the claim to release it", c.Spec.VolumeName, cs.PV)
	}
	return cs
}

// claimView returns a copy of c as bound per st: spec.volumeName, phase
// Bound (Lost when its PersistentVolume is gone) and the bind annotations;
// or, unbound, phase Pending without a volumeName.
func (s *Source) claimView(c *v1.PersistentVolumeClaim, st *state) *v1.PersistentVolumeClaim {
	view := c.DeepCopy()
	r, ok := st.recs.bound(keyOf(c))
	if !ok {
		view.Spec.VolumeName = ""
		delete(view.Annotations, storagehelpers.AnnBindCompleted)
		delete(view.Annotations, storagehelpers.AnnBoundByController)
		view.Status = v1.PersistentVolumeClaimStatus{Phase: v1.ClaimPending}
		if why := st.pending[keyOf(c)]; why != "" {
			view.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: volume.ClaimNotBound, Status: v1.ConditionTrue, Message: why}}
		}
		return view
	}
	view.Spec.VolumeName = r.PV
	metav1.SetMetaDataAnnotation(&view.ObjectMeta, storagehelpers.AnnBindCompleted, "yes")
	if c.Spec.VolumeName != r.PV {
		metav1.SetMetaDataAnnotation(&view.ObjectMeta, storagehelpers.AnnBoundByController, "yes")
	}
	view.Status = v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}
	pv, err := s.persistentVolume(r.PV, st)
	switch {
	case err == nil:
		view.Status.AccessModes = slices.Clone(pv.Spec.AccessModes)
		view.Status.Capacity = pv.Spec.Capacity.DeepCopy()
		resizingView(view, r)
	case errors.Is(err, volume.ErrNotFound):
		view.Status.Phase = v1.ClaimLost
	}
	return view
}

// persistentVolume returns the named PersistentVolume as defined: the one
// the binder provisioned under that name (which shadows one of the inner
// source of the same name), else the inner source's.
func (s *Source) persistentVolume(name string, st *state) (*v1.PersistentVolume, error) {
	if pv := st.recs.provisioned(name); pv != nil {
		return pv, nil
	}
	return s.inner.Objects().PersistentVolume(name)
}

// PersistentVolumes returns every PersistentVolume, those of the inner
// source and those the binder provisioned, as the PV controller would leave
// them, sorted by name.
func (s *Source) PersistentVolumes() []*v1.PersistentVolume {
	st := s.current()
	var out []*v1.PersistentVolume
	for _, pv := range s.inner.PersistentVolumes() {
		if st.recs.provisioned(pv.Name) == nil {
			out = append(out, pvView(pv, st))
		}
	}
	for _, r := range st.recs {
		if r.Provisioned != nil {
			out = append(out, pvView(r.Provisioned, st))
		}
	}
	slices.SortFunc(out, func(a, b *v1.PersistentVolume) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// pvView returns a copy of pv with the claimRef and phase of its record:
// Bound or Released, or Available (claimRef as defined) without one.
func pvView(pv *v1.PersistentVolume, st *state) *v1.PersistentVolume {
	view := pv.DeepCopy()
	r, ok := st.recs[pv.Name]
	if !ok {
		view.Status = v1.PersistentVolumeStatus{Phase: v1.VolumeAvailable}
		return view
	}
	claim := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name, UID: r.UID}}
	if !storagehelpers.IsVolumeBoundToClaim(pv, claim) {
		metav1.SetMetaDataAnnotation(&view.ObjectMeta, storagehelpers.AnnBoundByController, "yes")
	}
	view.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
		Namespace: r.Namespace, Name: r.Name, UID: r.UID}
	phase := v1.VolumeBound
	if r.Phase == PhaseReleased {
		phase = v1.VolumeReleased
	}
	view.Status = v1.PersistentVolumeStatus{Phase: phase}
	return view
}

// objects implements volume.Objects with the binder's views.
type objects struct{ s *Source }

func (o objects) ConfigMap(namespace, name string) (*v1.ConfigMap, error) {
	return o.s.inner.Objects().ConfigMap(namespace, name)
}

func (o objects) Secret(namespace, name string) (*v1.Secret, error) {
	return o.s.inner.Objects().Secret(namespace, name)
}

// PersistentVolumeClaim returns the claim made for an ephemeral volume of
// that name, else the inner source's. When neither exists and the
// template of an ephemeral volume is refused, the error says why.
func (o objects) PersistentVolumeClaim(namespace, name string) (*v1.PersistentVolumeClaim, error) {
	st := o.s.current()
	if m, ok := st.made[namespace+"/"+name]; ok {
		return o.s.claimView(m.Claim, st), nil
	}
	c, err := o.s.inner.Objects().PersistentVolumeClaim(namespace, name)
	if why := st.refused[namespace+"/"+name]; why != "" && errors.Is(err, volume.ErrNotFound) {
		return nil, errors.New(why)
	}
	if errors.Is(err, volume.ErrNotFound) {
		if view := o.s.removedView(namespace, name, st); view != nil {
			return view, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return o.s.claimView(c, st), nil
}

// removedView returns the view of claim namespace/name, removed from the
// source, whose Bound record is kept (st.held says why), as a cluster shows
// a claim its pvc-protection finalizer holds: still bound, and being
// deleted (the volume.ClaimRemoved condition, with the words GET
// /v1/claims shows). A pod that still runs with it keeps its volume as it
// is. nil when there is no such record.
func (s *Source) removedView(namespace, name string, st *state) *v1.PersistentVolumeClaim {
	for _, r := range st.recs.sorted() {
		why := st.held[r.claim()]
		if r.Phase != PhaseBound || r.Namespace != namespace || r.Name != name || why == "" {
			continue
		}
		view := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: r.UID}}
		metav1.SetMetaDataAnnotation(&view.ObjectMeta, storagehelpers.AnnBindCompleted, "yes")
		view.Spec.VolumeName = r.PV
		view.Status = v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound,
			Conditions: []v1.PersistentVolumeClaimCondition{{Type: volume.ClaimRemoved, Status: v1.ConditionTrue, Message: why}}}
		if pv, err := s.persistentVolume(r.PV, st); err == nil {
			view.Spec.VolumeMode = pv.Spec.VolumeMode
			view.Status.AccessModes = slices.Clone(pv.Spec.AccessModes)
			view.Status.Capacity = pv.Spec.Capacity.DeepCopy()
		}
		return view
	}
	return nil
}

// shadowed says why a claim of the source is not used: m, made for an
// ephemeral volume, has its name.
func shadowed(m madeClaim) string {
	return fmt.Sprintf("not used: the agent made a claim of this name for ephemeral volume %q of the pod with UID %s, "+
		"which it keeps until that pod is deleted", m.Volume, m.PodUID)
}

func (o objects) PersistentVolume(name string) (*v1.PersistentVolume, error) {
	st := o.s.current()
	pv, err := o.s.persistentVolume(name, st)
	if err != nil {
		return nil, err
	}
	return pvView(pv, st), nil
}

// reclaimPolicy is what the binder does with r's data once released.
func (r record) reclaimPolicy() string {
	if r.deletable() {
		return string(v1.PersistentVolumeReclaimDelete)
	}
	return string(v1.PersistentVolumeReclaimRetain)
}

// pendingDeletion describes the reclaim step of a Released record whose
// storage is to be deleted, or nil.
func (r record) pendingDeletion() *PendingDeletion {
	if r.Phase != PhaseReleased || !r.deletable() {
		return nil
	}
	p := PendingDeletionOf(r.Reclaim)
	p.Archive = r.Provisioned.Annotations[provisioner.AnnArchiveOnDelete] == "true"
	return p
}

// PendingDeletionOf describes storage at reclaim step s, for /v1/claims.
func PendingDeletionOf(s reclaim.State) *PendingDeletion {
	p := &PendingDeletion{Step: string(s.Step)}
	switch s.Step {
	case reclaim.Released:
		p.Step = "Released"
	case reclaim.Aside:
		at := s.DeleteAfter.UTC().Add(time.Second - 1).Truncate(time.Second) // never before it
		p.DeleteAfter = &at
	}
	return p
}
