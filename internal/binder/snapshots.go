package binder

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/evidence"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/local"
	"github.com/volume-agent/volume-agent/internal/source/volumesnapshot"
)

// snapStep is where a snapshot is in its life.
type snapStep string

// The steps of a snapshot. Taking is written before the provisioner is
// asked to take it, so that a snapshot a crash cut short is taken (found)
// again after the restart, and deleted like any other once its
// VolumeSnapshot is gone: none is left that no record knows. Deleting is
// written before it is asked to delete it, and a deletion once begun is
// finished, whatever restarts; the record is dropped once it succeeded.
const (
	snapTaking   snapStep = "Taking"
	snapReady    snapStep = "Ready"
	snapDeleting snapStep = "Deleting"
)

// snapRecord is one snapshot as stored in the state file: the identity of
// the VolumeSnapshot it was taken for (namespace, name, UID), of the claim
// and the PersistentVolume it was taken of at that moment, and its name in
// the provisioner's storage.
type snapRecord struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// UID is the VolumeSnapshot's metadata.uid ("" in a manifest without
	// one, which is then known by its namespace and name alone, as claims
	// are): a VolumeSnapshot of the same name and another UID is another
	// snapshot, and never gets this one's data.
	UID types.UID `json:"uid,omitempty"`
	// Handle names the snapshot in its provisioner's storage:
	// snapshot-<nonce>, the nonce drawn when the record is made, so that
	// no later VolumeSnapshot, whatever its name or UID, reaches it.
	Handle      string `json:"handle"`
	Provisioner string `json:"provisioner"`
	// Claim and ClaimUID are the claim (in Namespace) the snapshot is of;
	// PV its PersistentVolume when the record was made (a read-only
	// snapshot).
	Claim    string               `json:"claim"`
	ClaimUID types.UID            `json:"claimUID,omitempty"`
	PV       *v1.PersistentVolume `json:"pv"`
	Step     snapStep             `json:"step"`
	// Size is the size a volume made from it has at least (the source
	// volume's, a quantity), and Created when it was taken; both set
	// once Ready.
	Size    string    `json:"size,omitempty"`
	Created time.Time `json:"created,omitzero"`
	// RemovedAt is when the removal of its VolumeSnapshot from the
	// manifests counted (evidence.Removed); it is deleted once the reclaim
	// delay has passed since. Zero while the VolumeSnapshot is there.
	RemovedAt time.Time `json:"removedAt,omitzero"`
}

// snapKey identifies a VolumeSnapshot, as claimKey does a claim.
type snapKey struct {
	namespace string
	name      string
	uid       types.UID
}

func snapKeyOf(s *volumesnapshot.VolumeSnapshot) snapKey {
	return snapKey{namespace: s.Namespace, name: s.Name, uid: s.UID}
}

func (k snapKey) String() string { return k.namespace + "/" + k.name }

func (r snapRecord) key() snapKey { return snapKey{namespace: r.Namespace, name: r.Name, uid: r.UID} }

// snapRecords are the snapshots by handle. A snapRecords value is never
// modified once published; plan works on a clone.
type snapRecords map[string]snapRecord

// of returns the record of the VolumeSnapshot k.
func (ss snapRecords) of(k snapKey) (snapRecord, bool) {
	for _, r := range ss {
		if r.key() == k {
			return r, true
		}
	}
	return snapRecord{}, false
}

// sorted returns the records by namespace, name, then handle.
func (ss snapRecords) sorted() []snapRecord {
	out := slices.Collect(maps.Values(ss))
	slices.SortFunc(out, func(a, b snapRecord) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Handle, b.Handle))
	})
	return out
}

// snapshotOp asks the driver to take (snapTaking) or delete (snapDeleting)
// the snapshot of r.
type snapshotOp struct {
	step snapStep
	r    snapRecord
}

// snapshots decides on every VolumeSnapshot and every snapshot record,
// after the claims (it reads their bindings and the provisionings under
// way): a snapshot is taken of a claim once it is Bound to a volume the
// local provisioner made, recorded Taking first; taken, it is Ready; its
// VolumeSnapshot removed (evidence.Removed, as a claim's removal), it is
// deleted once the reclaim delay has passed since, never while a claim is
// being restored from it, the step Deleting recorded first.
func (o *outcome) snapshots(w world) {
	o.snaps = maps.Clone(w.snapRecs)
	if o.snaps == nil {
		o.snaps = snapRecords{}
	}
	o.recordSnapshotOps(w)
	listed := map[snapKey]bool{}
	for _, s := range w.snapshots {
		listed[snapKeyOf(s)] = true
		o.snapshot(w, s)
	}
	for _, r := range o.snaps.sorted() {
		if !listed[r.key()] {
			o.snapshotRemoved(w, r)
		}
	}
	for _, r := range o.snaps.sorted() {
		if r.Step == snapTaking || r.Step == snapDeleting {
			o.snapOps = append(o.snapOps, snapshotOp{step: r.Step, r: r})
			o.snapFailed(w, r)
		}
	}
}

// snapFailed says, for r being taken or deleted, that the last call
// failed and is retried, and why.
func (o *outcome) snapFailed(w world, r snapRecord) {
	err := w.ops.failed[r.Handle]
	switch {
	case err == "":
	case r.Step == snapTaking && listedKey(w, r.key()):
		o.snapPending[r.key()] = fmt.Sprintf("taking snapshot %q failed, retrying: %s", r.Handle, err)
	case r.Step == snapTaking:
		o.snapHeld[r.Handle] = fmt.Sprintf("taking snapshot %q failed, retrying: %s", r.Handle, err)
	default:
		o.snapHeld[r.Handle] = fmt.Sprintf("deleting snapshot %q failed, retrying: %s", r.Handle, err)
	}
}

func listedKey(w world, k snapKey) bool {
	for _, s := range w.snapshots {
		if snapKeyOf(s) == k {
			return true
		}
	}
	return false
}

// recordSnapshotOps records the snapshots just taken, Ready, and drops
// those just deleted.
func (o *outcome) recordSnapshotOps(w world) {
	for _, handle := range slices.Sorted(maps.Keys(w.ops.taken)) {
		r, ok := o.snaps[handle]
		if !ok || r.Step != snapTaking {
			continue
		}
		info := w.ops.taken[handle]
		r.Step, r.Size, r.Created = snapReady, info.Size.String(), info.Created.UTC()
		o.snaps[handle] = r
		o.snapEvent(r, "snapshot taken, ready to use")
	}
	for handle := range w.ops.snapDeleted {
		if r, ok := o.snaps[handle]; ok && r.Step == snapDeleting {
			delete(o.snaps, handle)
			o.snapEvent(r, "snapshot deleted; record dropped")
		}
	}
}

// snapshot decides on VolumeSnapshot s of the source.
func (o *outcome) snapshot(w world, s *volumesnapshot.VolumeSnapshot) {
	k := snapKeyOf(s)
	r, ok := o.snaps.of(k)
	switch {
	case ok && r.Step == snapDeleting:
		o.snapPending[k] = fmt.Sprintf("its earlier snapshot %q is being deleted (its VolumeSnapshot stayed removed for the reclaim delay); "+
			"a new one is taken once it is gone", r.Handle)
	case ok && s.ClaimName() != r.Claim:
		o.snapPending[k] = fmt.Sprintf("spec.source.persistentVolumeClaimName is %q, but the snapshot was taken of claim %q: "+
			"a VolumeSnapshot's source never changes; give a snapshot of %q another name", s.ClaimName(), r.Claim, s.ClaimName())
	case ok && !r.RemovedAt.IsZero():
		r.RemovedAt = time.Time{}
		o.snaps[r.Handle] = r
		o.snapEvent(r, "VolumeSnapshot back in the manifests: its snapshot is kept")
	case ok:
	default:
		if why := o.takeSnapshot(w, s); why != "" {
			o.snapPending[k] = why
		}
	}
}

// takeSnapshot records a snapshot of the claim s names, Taking, or says
// why it waits or is refused.
func (o *outcome) takeSnapshot(w world, s *volumesnapshot.VolumeSnapshot) string {
	if why := snapshotClassProblem(w, s); why != "" {
		return why
	}
	ck := claimKey{namespace: s.Namespace, name: s.ClaimName()}
	c := w.claimNamed(ck.namespace, ck.name)
	if c == nil {
		return fmt.Sprintf("waiting for claim %s, which spec.source.persistentVolumeClaimName names, to exist", ck)
	}
	r, ok := o.recs.bound(keyOf(c))
	if !ok {
		return fmt.Sprintf("waiting for claim %s to be bound (a claim is provisioned once a pod uses it)", ck)
	}
	if why := snapshottable(w, r); why != "" {
		return why
	}
	handle := "snapshot-" + w.nonce()
	nr := snapRecord{Namespace: s.Namespace, Name: s.Name, UID: s.UID, Handle: handle, Provisioner: r.provisionedBy(),
		Claim: c.Name, ClaimUID: c.UID, PV: r.Provisioned, Step: snapTaking}
	o.snaps[handle] = nr
	o.snapEvent(nr, "snapshot recorded, being taken")
	return ""
}

// snapshotClassProblem says why the class s names cannot take it, or "".
func snapshotClassProblem(w world, s *volumesnapshot.VolumeSnapshot) string {
	name := s.ClassName()
	if name == "" {
		return ""
	}
	class, ok := w.snapClasses[name]
	switch {
	case !ok:
		return fmt.Sprintf("waiting for VolumeSnapshotClass %q, which spec.volumeSnapshotClassName names, to exist", name)
	case provisioner.Canonical(class.Driver) != provisioner.LocalName:
		return fmt.Sprintf("VolumeSnapshotClass %q names driver %q: the agent takes snapshots only for %q; "+
			"name a class of that driver, or none", name, class.Driver, provisioner.LocalName)
	}
	return ""
}

// snapshottable says why the storage of r, a Bound record, cannot be
// snapshotted, or "".
func snapshottable(w world, r record) string {
	switch {
	case r.Provisioned == nil || r.provisionedBy() != provisioner.LocalName:
		return fmt.Sprintf("claim %s is bound to PersistentVolume %q, which the agent's local provisioner did not make: "+
			"only its volumes can be snapshotted", r.claim(), r.PV)
	case r.Provisioned.Annotations[local.AnnCapacity] == "":
		return fmt.Sprintf("claim %s is bound to PersistentVolume %q, a plain directory (class parameter %s \"false\"): "+
			"a copy of a live plain directory is not point-in-time, so it is not snapshotted; use a class with %s: \"true\"",
			r.claim(), r.PV, local.ParamEnforce, local.ParamEnforce)
	case modeOf(r.Provisioned.Spec.VolumeMode) == v1.PersistentVolumeBlock:
		return fmt.Sprintf("claim %s is bound to PersistentVolume %q, a raw block volume: snapshots and clones of raw block volumes are not supported",
			r.claim(), r.PV)
	case !w.snapshotters[provisioner.LocalName]:
		return fmt.Sprintf("the local provisioner of PersistentVolume %q does not run on this agent (--provisioners), "+
			"so nothing can take its snapshot", r.PV)
	}
	return ""
}

// snapshotRemoved decides on r, whose VolumeSnapshot is not in the source:
// its removal recorded once it counts, then the snapshot deleted once the
// reclaim delay has passed since, unless a claim is being restored from
// it, or it is still being taken.
func (o *outcome) snapshotRemoved(w world, r snapRecord) {
	if r.Step == snapDeleting {
		return
	}
	if r.RemovedAt.IsZero() {
		if why := o.snapRemovalPending(w, r.key()); why != "" {
			o.snapHeld[r.Handle] = "removed from the manifests, but the removal does not count yet: " + why
			return
		}
		r.RemovedAt = w.now
		o.snaps[r.Handle] = r
		o.snapEvent(r, "VolumeSnapshot removed from the manifests: its snapshot is deleted after the reclaim delay")
	}
	due := r.RemovedAt.Add(w.delay)
	switch {
	case w.now.Before(due):
		o.dueAt(due)
	case o.restoring(r.Handle) != "":
		o.snapHeld[r.Handle] = fmt.Sprintf("not deleted while claim %s is being restored from it", o.restoring(r.Handle))
	case w.ops.running[r.Handle]:
		o.snapHeld[r.Handle] = "not deleted while it is being taken"
	default:
		r.Step = snapDeleting
		o.snaps[r.Handle] = r
		o.snapEvent(r, "snapshot being deleted: its VolumeSnapshot stayed removed for the reclaim delay")
	}
}

// snapRemovalPending says why the removal of VolumeSnapshot k does not
// count yet, or "", by the rules of a claim's removal (removalPending): a
// source that lists nothing removes nothing.
func (o *outcome) snapRemovalPending(w world, k snapKey) string {
	seen := w.obs.snapsSeen[k]
	if seen && w.obs.emptied {
		return "the manifests list nothing at all, and an emptied directory never deletes a snapshot"
	}
	v := evidence.Removed(w.listing, evidence.Absence{Seen: seen, Since: w.obs.snapsGone[k]}, w.now, w.settle)
	if v.Removed {
		return ""
	}
	o.dueAt(v.Due)
	return v.Why
}

// restoring names the claim being restored from the snapshot handle (a
// provisioning under way whose content it is), or "".
func (o *outcome) restoring(handle string) string {
	for _, r := range o.recs.sorted() {
		if p := r.Provisioning; p != nil && p.Content != nil && p.Content.Snapshot == handle {
			return r.claim().String()
		}
	}
	return ""
}

func (o *outcome) snapEvent(r snapRecord, msg string) {
	o.events = append(o.events, event{msg: msg, snapshot: r.key().String(), pv: r.Handle})
}

// claimNamed returns the claim namespace/name of w, or nil.
func (w world) claimNamed(namespace, name string) *v1.PersistentVolumeClaim {
	for _, c := range w.claims {
		if c.Namespace == namespace && c.Name == name {
			return c
		}
	}
	return nil
}
