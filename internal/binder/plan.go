package binder

import (
	"fmt"
	"maps"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/volume-agent/volume-agent/internal/evidence"
	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/source/volumesnapshot"
)

// world is the inner source at one moment, as one pass sees it, with what
// the driver knows besides.
type world struct {
	pods []*v1.Pod
	// claims are sorted by namespace and name, so passes are deterministic.
	claims []*v1.PersistentVolumeClaim
	pvs    []*v1.PersistentVolume
	// node is this node as nodeAffinity sees it (see thisNode).
	node *v1.Node
	// classes are the StorageClasses of the inner source, by name.
	classes map[string]*storagev1.StorageClass
	// provisioners are the names of the provisioners the binder runs.
	provisioners map[string]bool
	// expanders are the names of the provisioners that can expand
	// volumes (provisioner.Expander).
	expanders map[string]bool
	// ops is what the driver's storage operations report.
	ops opsState

	now time.Time
	// settle is how long a claim must stay removed before it is released.
	settle time.Duration
	// delay is the reclaim delay: how long released storage stays aside
	// before it is deleted, and how long a released static
	// PersistentVolume must stay removed before its binding is forgotten.
	delay time.Duration
	// obs is what the driver saw of the source since start (observe).
	obs observations
	// inUse reports whether a pod on this node has the named
	// PersistentVolume set up, or whether that is not known yet; nil: never.
	inUse func(pv string) bool
	// listing is what the inner source's list is evidence of (package
	// evidence).
	listing evidence.Listing
	// made are the claims made for ephemeral volumes, after this pass's
	// makeClaims.
	made madeClaims
	// newNonce draws the nonce of a claim made for an ephemeral volume
	// or of a snapshot's handle; nil: evidence.NewNonce.
	newNonce func() string
	// snapshots are the VolumeSnapshots of the inner source, sorted by
	// namespace and name; snapClasses its VolumeSnapshotClasses by name.
	snapshots   []*volumesnapshot.VolumeSnapshot
	snapClasses map[string]*volumesnapshot.VolumeSnapshotClass
	// snapshotters are the names of the provisioners that take snapshots
	// (Config.Snapshotters).
	snapshotters map[string]bool
	// snapRecs are the snapshot records before the pass.
	snapRecs snapRecords
}

func (w world) nonce() string {
	if w.newNonce == nil {
		return evidence.NewNonce()
	}
	return w.newNonce()
}

func (w world) claimSet() map[claimKey]bool {
	claims := make(map[claimKey]bool, len(w.claims))
	for _, c := range w.claims {
		claims[keyOf(c)] = true
	}
	return claims
}

func (w world) busy(pv string) bool { return w.inUse != nil && w.inUse(pv) }

// event is a binding decision, logged once it is on disk.
type event struct {
	msg   string
	claim claimKey
	pv    string
	// snapshot names the VolumeSnapshot of an event of a snapshot, whose
	// pv is the snapshot's handle; "" for a claim's.
	snapshot string
}

// outcome is what one pass decided.
type outcome struct {
	// recs are the records after the pass.
	recs records
	// pending says why a claim that a pod uses has no PersistentVolume.
	pending map[claimKey]string
	// held says why a claim removed from the source, whose record is
	// Bound, is not released yet.
	held map[claimKey]string
	// resizing says why a bound claim does not have the size it asks
	// for: being expanded, or refused.
	resizing map[claimKey]resizeStatus
	events   []event
	// provisions and storage are the operations the driver is to run once
	// recs are on disk (it skips those running or backing off).
	provisions []provisionOp
	storage    []storageOp
	expansions []expandOp
	// due is the earliest time at which a pass would decide otherwise by
	// the passing of time alone; zero when none.
	due time.Time
	// waitsOnUse is set when something waits for a PersistentVolume to be
	// no longer set up for a pod.
	waitsOnUse bool
	// snaps are the snapshot records after the pass; snapPending says
	// why a VolumeSnapshot of the source has no snapshot (yet), snapHeld,
	// by handle, why a snapshot whose VolumeSnapshot is gone is not
	// deleted yet; snapOps are the snapshots to take or delete once snaps
	// are on disk.
	snaps       snapRecords
	snapPending map[snapKey]string
	snapHeld    map[string]string
	snapOps     []snapshotOp
}

// plan computes the records after one pass over w, in this order: the
// reclaim policies claims ask for are applied to their provisioned
// PersistentVolumes (AnnReclaimPolicy); Bound records whose claim has been removed (and has stayed so) are released;
// PersistentVolumes just provisioned are recorded; Released records are
// bound again, restored, moved aside, deleted or dropped (reclaim); then
// every claim used by a pod that is not terminated, and not bound yet, is
// matched (WaitForFirstConsumer), or else provisioned (the provisioning
// recorded first, and asked for again after a restart until it is
// recorded made: provisionRecorded); bound claims
// that ask for more storage are expanded (expand); last, snapshots are
// taken, recorded and deleted (snapshots). A claim with a data source is
// never matched to a PersistentVolume of the source, which would not hold
// its source's data: it is provisioned from it (content). It never changes the
// PersistentVolume of a Bound record. Pure: w and prev are not modified;
// I/O is left to the driver as operations.
func plan(w world, prev records) outcome {
	o := outcome{recs: maps.Clone(prev), pending: map[claimKey]string{}, held: map[claimKey]string{}, resizing: map[claimKey]resizeStatus{},
		snapPending: map[snapKey]string{}, snapHeld: map[string]string{}}
	o.applyPolicies(w)
	o.release(w)
	o.recordMade(w)
	o.settleReleased(w)
	o.bindUsed(w)
	o.provisionRecorded(w)
	o.expand(w)
	o.snapshots(w)
	return o
}

// release releases every Bound record whose claim's removal counts
// (removalPending), that no pod that is not terminated names (as
// pvc-protection would keep the claim) and that no pod on this node has
// set up. Until then the record stays Bound, and held says why.
func (o *outcome) release(w world) {
	claims := w.claimSet()
	used := usedClaims(w.pods, w.claims)
	for _, c := range w.claims { // a pod names a claim of the same name but another UID: not this one
		delete(used, keyOf(c).String())
	}
	for _, r := range o.recs.sorted() {
		k := r.claim()
		if r.Phase != PhaseBound || claims[k] {
			continue
		}
		why := o.removalPending(w, k)
		switch {
		case why != "":
		case used[k.String()]:
			why = "a pod that is not terminated still names it"
		case o.cloning(r.PV) != "":
			why = fmt.Sprintf("claim %s is being cloned from it", o.cloning(r.PV))
		case w.busy(r.PV):
			why = fmt.Sprintf("PersistentVolume %q is still set up for a pod on this node", r.PV)
			o.waitsOnUse = true
		}
		if why != "" {
			o.held[k] = "removed from the manifests but not released: " + why
			continue
		}
		r.ReleasedAt = w.now
		o.set(r, PhaseReleased, "claim released")
	}
}

// removalPending says why the removal of claim k does not count yet, or
// "" (evidence.Removed): a claim seen since the agent started counts as
// removed once it has been missing for the settle time; a claim absent at
// start once the source has listed objects, without a pause, for the
// settle time. A source that lists nothing releases nothing, not even a
// claim seen and dropped before it emptied (a directory emptied by a tool
// before it is filled again). A claim made for an ephemeral volume lives
// and dies with its pod instead (madeRemovalPending). A claim released is
// only put aside for the reclaim delay, restorable by the same claim.
func (o *outcome) removalPending(w world, k claimKey) string {
	if m, ok := w.made[k.namespace+"/"+k.name]; ok && m.Claim.UID == k.uid {
		return o.madeRemovalPending(w, m)
	}
	seen := w.obs.claimsSeen[k]
	if seen && w.obs.emptied {
		return "the manifests list no pods, claims, PersistentVolumes or StorageClasses at all, and an emptied directory never releases a claim"
	}
	v := evidence.Removed(w.listing, evidence.Absence{Seen: seen, Since: w.obs.claimsGone[k]}, w.now, w.settle)
	if v.Removed {
		return ""
	}
	o.dueAt(v.Due)
	return v.Why
}

// madeRemovalPending says why the removal of m, a claim made for an
// ephemeral volume, does not count yet, or "": it counts once its pod's
// does (evidence.Removed). A pod listed since the agent started and then
// dropped was removed (its source held the removal before dropping it, and
// its volumes are torn down at once: its claim must not outlive it); a pod
// absent at start is removed once the source has listed objects for the
// settle time, never while the source lists nothing.
func (o *outcome) madeRemovalPending(w world, m madeClaim) string {
	seen := w.obs.podsSeen[m.PodUID]
	hold := w.settle
	if seen {
		hold = 0
	}
	v := evidence.Removed(w.listing, evidence.Absence{Seen: seen, Since: w.obs.podsGone[m.PodUID]}, w.now, hold)
	if v.Removed {
		return ""
	}
	o.dueAt(v.Due)
	return fmt.Sprintf("its pod (uid %s) is not in the manifests, but its removal does not count yet: %s", m.PodUID, v.Why)
}

// pvRemoved reports whether the PersistentVolume name, seen since the
// agent started, has been missing from the source for the reclaim delay.
func (o *outcome) pvRemoved(w world, name string) bool {
	since, gone := w.obs.pvsGone[name]
	if !gone || !w.obs.pvsSeen[name] || w.obs.emptied {
		return false
	}
	if w.now.Sub(since) < w.delay {
		o.dueAt(since.Add(w.delay))
		return false
	}
	return true
}

func (o *outcome) dueAt(t time.Time) {
	if !t.IsZero() && (o.due.IsZero() || t.Before(o.due)) {
		o.due = t
	}
}

func (o *outcome) set(r record, phase Phase, msg string) {
	r.Phase = phase
	o.recs[r.PV] = r
	o.events = append(o.events, event{msg: msg, claim: r.claim(), pv: r.PV})
}

// drop forgets r.
func (o *outcome) drop(r record, msg string) {
	delete(o.recs, r.PV)
	o.events = append(o.events, event{msg: msg, claim: r.claim(), pv: r.PV})
}

// bindUsed matches every claim a pod uses that has no Bound record, or
// else provisions it.
func (o *outcome) bindUsed(w world) {
	used := usedClaims(w.pods, w.claims)
	cands := candidates{pvs: w.pvs, node: w.node, unavailable: o.unavailable(w.claims)}
	for _, c := range w.claims {
		k := keyOf(c)
		if !used[k.String()] {
			continue
		}
		if _, ok := o.recs.bound(k); ok {
			continue
		}
		if why := o.waiting(w, c); why != "" {
			o.pending[k] = why
			continue
		}
		if dataSourceOf(c) != nil {
			o.pending[k] = o.provisionFrom(w, c)
			continue
		}
		pv, why := match(c, cands)
		if pv == nil {
			o.pending[k] = o.provision(w, c, why)
			continue
		}
		o.recs[pv.Name] = record{Namespace: k.namespace, Name: k.name, UID: k.uid, PV: pv.Name, Phase: PhaseBound}
		cands.unavailable[pv.Name] = holder{claim: k, why: "bound to " + k.String()}
		o.events = append(o.events, event{msg: "claim bound", claim: k, pv: pv.Name})
	}
}

// unavailable lists the PersistentVolumes that belong to a claim: those of
// the records, and those a claim names in spec.volumeName (the PV
// controller would have bound them to that claim at once), the first claim
// in order winning.
func (o *outcome) unavailable(claims []*v1.PersistentVolumeClaim) map[string]holder {
	taken := make(map[string]holder, len(o.recs))
	for pv, r := range o.recs {
		why := "bound to " + r.claim().String()
		if r.Phase == PhaseReleased {
			why = "released by " + r.claim().String() + " and retained for it"
		}
		taken[pv] = holder{claim: r.claim(), why: why}
	}
	for _, c := range claims {
		if _, ok := taken[c.Spec.VolumeName]; !ok && c.Spec.VolumeName != "" {
			taken[c.Spec.VolumeName] = holder{claim: keyOf(c), why: "named by spec.volumeName of claim " + keyOf(c).String()}
		}
	}
	return taken
}

// usedClaims returns "namespace/name" of every claim that a pod that is not
// terminated uses: through a persistentVolumeClaim volume, or through a
// generic ephemeral volume when the claim of that name among claims is the
// pod's (a claim the pod does not own is never used for it).
func usedClaims(pods []*v1.Pod, claims []*v1.PersistentVolumeClaim) map[string]bool {
	used := map[string]bool{}
	byName := make(map[string]*v1.PersistentVolumeClaim, len(claims))
	for _, c := range claims {
		byName[keyOf(c).String()] = c
	}
	for _, pod := range pods {
		if source.Terminated(pod) {
			continue
		}
		for _, key := range ephemeralClaims(pod, byName) {
			used[key] = true
		}
		for _, vol := range pod.Spec.Volumes {
			if pvc := vol.PersistentVolumeClaim; pvc != nil {
				used[pod.Namespace+"/"+pvc.ClaimName] = true
			}
		}
	}
	return used
}
