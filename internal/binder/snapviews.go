package binder

import (
	"cmp"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// SnapshotStatus is one VolumeSnapshot, or one snapshot whose
// VolumeSnapshot was removed, as GET /v1/claims shows it.
type SnapshotStatus struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// UID is the metadata.uid of the VolumeSnapshot the snapshot was
	// taken for (none for a manifest without one).
	UID types.UID `json:"uid,omitempty"`
	// Claim is the claim (of Namespace) it is of, and PV that claim's
	// PersistentVolume when it was taken.
	Claim string `json:"claim"`
	PV    string `json:"pv,omitempty"`
	// Snapshot names it in the provisioner's storage.
	Snapshot string `json:"snapshot,omitempty"`
	// ReadyToUse: a claim can be made from it.
	ReadyToUse bool `json:"readyToUse"`
	// RestoreSize is the least size of a claim made from it, and
	// CreationTime when it was taken; both set once it is ready.
	RestoreSize  string     `json:"restoreSize,omitempty"`
	CreationTime *time.Time `json:"creationTime,omitempty"`
	// Removed is set on a snapshot whose VolumeSnapshot was removed from
	// the manifests; DeleteAfter is when it is deleted (once its removal
	// counted), Deleting that it is being deleted.
	Removed     bool       `json:"removed,omitempty"`
	DeleteAfter *time.Time `json:"deleteAfter,omitempty"`
	Deleting    bool       `json:"deleting,omitempty"`
	// Error says why it is not taken (yet), or what it waits for.
	Error string `json:"error,omitempty"`
}

// Snapshots returns every VolumeSnapshot of the inner source, then every
// snapshot whose VolumeSnapshot was removed, sorted by namespace and name
// (a current one before a removed one of the same name).
func (s *Source) Snapshots() []SnapshotStatus {
	st := s.current()
	out := []SnapshotStatus{}
	present := map[snapKey]bool{}
	for _, vs := range s.inner.VolumeSnapshots() {
		k := snapKeyOf(vs)
		present[k] = true
		ss := SnapshotStatus{Namespace: vs.Namespace, Name: vs.Name, UID: vs.UID, Claim: vs.ClaimName(), Error: st.snapPending[k]}
		if r, ok := st.snaps.of(k); ok {
			ss = snapshotStatus(r, st, s.delay)
			ss.Error = cmp.Or(st.snapPending[k], ss.Error)
		}
		out = append(out, ss)
	}
	for _, r := range st.snaps.sorted() {
		if !present[r.key()] {
			ss := snapshotStatus(r, st, s.delay)
			ss.Removed = true
			out = append(out, ss)
		}
	}
	slices.SortStableFunc(out, func(a, b SnapshotStatus) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// snapshotStatus shows r.
func snapshotStatus(r snapRecord, st *state, delay time.Duration) SnapshotStatus {
	ss := SnapshotStatus{Namespace: r.Namespace, Name: r.Name, UID: r.UID, Claim: r.Claim, PV: r.PV.Name, Snapshot: r.Handle,
		ReadyToUse: r.Step == snapReady, RestoreSize: r.Size, Deleting: r.Step == snapDeleting, Error: st.snapHeld[r.Handle]}
	if !r.Created.IsZero() {
		created := r.Created
		ss.CreationTime = &created
	}
	if !r.RemovedAt.IsZero() && r.Step != snapDeleting {
		at := r.RemovedAt.Add(delay).UTC().Add(time.Second - 1).Truncate(time.Second) // never before it
		ss.DeleteAfter = &at
	}
	return ss
}
