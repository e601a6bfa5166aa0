package binder

import (
	"cmp"
	"maps"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/reclaim"
)

// Phase is a claim's state as /v1/claims shows it.
type Phase string

// The phases of a claim. Only Bound and Released are recorded; Pending and
// Lost are derived (no record; a Bound record whose PersistentVolume is gone).
const (
	PhasePending  Phase = "Pending"
	PhaseBound    Phase = "Bound"
	PhaseLost     Phase = "Lost"
	PhaseReleased Phase = "Released"
)

// phaseProvisioning is the phase of the record of a provisioning under way
// (record.Provisioning): written before the provisioner is called, so
// that storage made just before a crash is recorded after the restart,
// even when its claim is gone by then. It is never shown as a claim's
// phase: such a claim is Pending.
const phaseProvisioning Phase = "Provisioning"

// record is one binding as stored in the state file.
type record struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	PV        string    `json:"pv"`
	// Phase is PhaseBound, or PhaseReleased once the claim left the source:
	// the PersistentVolume is kept for that claim alone (with reclaim policy
	// Delete, until its provisioner deleted its storage).
	Phase Phase `json:"phase"`
	// Provisioned is the PersistentVolume the binder provisioned for the
	// claim, named PV; nil for a PersistentVolume of the inner source. It is
	// a read-only snapshot, shown by the views as if it were in the source.
	Provisioned *v1.PersistentVolume `json:"provisioned,omitempty"`
	// ReleasedAt is when a Released record's claim was released.
	ReleasedAt time.Time `json:"releasedAt,omitzero"`
	// Reclaim is where the storage of a Released record with reclaim
	// policy Delete is in its lifecycle: in place, aside until a time, or
	// being deleted (see package reclaim). Zero for every other record.
	Reclaim reclaim.State `json:"reclaim,omitzero"`
	// ExpandTo is the size (a quantity) the storage of a Bound provisioned
	// PersistentVolume is being grown to, recorded before its provisioner
	// is asked to grow it; Provisioned's capacity is set to it, and it is
	// cleared, once that succeeded. "" when no expansion is under way.
	ExpandTo string `json:"expandTo,omitempty"`
	// Provisioning is the request of a provisioning under way, in a record
	// of phaseProvisioning; nil in every other record.
	Provisioning *provisionIntent `json:"provisioning,omitempty"`
	// Source names what a provisioned PersistentVolume was made from (a
	// claim it clones, a VolumeSnapshot it restores), for /v1/claims;
	// nil for an empty volume.
	Source *sourceRef `json:"source,omitempty"`
}

// sourceRef names a data source as the claim named it.
type sourceRef struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// provisionIntent is what a provisioning asks for, recorded before the
// provisioner is called: a restart makes the same call, whatever the
// source holds by then. Claim and Class are read-only snapshots.
type provisionIntent struct {
	Provisioner string                    `json:"provisioner"`
	Claim       *v1.PersistentVolumeClaim `json:"claim"`
	Class       *storagev1.StorageClass   `json:"class"`
	// Content is what the volume is made from; nil: an empty volume.
	Content *contentIntent `json:"content,omitempty"`
}

func (r record) claim() claimKey {
	return claimKey{namespace: r.Namespace, name: r.Name, uid: r.UID}
}

// records are the bindings by PersistentVolume name: a PersistentVolume
// belongs to at most one claim. A records value is never modified once
// published; plan works on a clone.
type records map[string]record

// bound returns the Bound record of claim k.
func (rs records) bound(k claimKey) (record, bool) {
	for _, r := range rs {
		if r.Phase == PhaseBound && r.claim() == k {
			return r, true
		}
	}
	return record{}, false
}

// of returns the record of claim k, Bound or Released.
func (rs records) of(k claimKey) (record, bool) {
	for _, r := range rs {
		if r.claim() == k {
			return r, true
		}
	}
	return record{}, false
}

// has reports whether claim k has a record.
func (rs records) has(k claimKey) bool {
	_, ok := rs.of(k)
	return ok
}

// provisioned returns the PersistentVolume the binder provisioned under name.
func (rs records) provisioned(name string) *v1.PersistentVolume { return rs[name].Provisioned }

// sorted returns the records by namespace, name, then PV name.
func (rs records) sorted() []record {
	out := slices.Collect(maps.Values(rs))
	slices.SortFunc(out, func(a, b record) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.PV, b.PV))
	})
	return out
}
