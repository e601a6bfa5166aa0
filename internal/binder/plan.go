package binder

import (
	"maps"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/volume-agent/volume-agent/internal/source"
)

// world is the inner source at one moment, as one pass sees it.
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
	// ops is what the driver's provisioning operations report.
	ops opsState
}

// event is a binding decision, logged once it is on disk.
type event struct {
	msg   string
	claim claimKey
	pv    string
}

// outcome is what one pass decided.
type outcome struct {
	// recs are the records after the pass.
	recs records
	// pending says why a claim that a pod uses has no PersistentVolume.
	pending map[claimKey]string
	events  []event
	// provisions and deletes are the operations the driver is to run once
	// recs are on disk (it skips those running or backing off).
	provisions []provisionOp
	deletes    []deleteOp
}

// plan computes the records after one pass over w, in this order: records
// whose claim or PersistentVolume left the source are released, bound again
// or dropped; PersistentVolumes just provisioned are recorded; released
// provisioned PersistentVolumes with reclaim policy Delete are deleted
// (reclaim); then every claim used by a pod that is not terminated, and not
// bound yet, is matched (WaitForFirstConsumer), or else provisioned. It
// never changes the PersistentVolume of a Bound record. Pure: w and prev
// are not modified; I/O is left to the driver as operations.
func plan(w world, prev records) outcome {
	o := outcome{recs: maps.Clone(prev), pending: map[claimKey]string{}}
	o.settle(w)
	o.recordMade(w)
	o.reclaim(w)
	o.bindUsed(w)
	return o
}

// settle applies what happened to the claims and PersistentVolumes of the
// records. A Bound record whose PersistentVolume is gone stays (the claim
// is Lost until it is back). A provisioned PersistentVolume lives in its
// record and is never gone. A Released one whose storage is being deleted
// is never bound again, even to the claim that released it.
func (o *outcome) settle(w world) {
	claims := make(map[claimKey]bool, len(w.claims))
	for _, c := range w.claims {
		claims[keyOf(c)] = true
	}
	pvs := make(map[string]bool, len(w.pvs))
	for _, pv := range w.pvs {
		pvs[pv.Name] = true
	}
	for _, r := range o.recs.sorted() {
		claimHere, pvHere := claims[r.claim()], pvs[r.PV] || r.Provisioned != nil
		switch {
		case !pvHere && !claimHere, !pvHere && r.Phase == PhaseReleased:
			delete(o.recs, r.PV)
			o.events = append(o.events, event{msg: "binding dropped: its PersistentVolume is gone", claim: r.claim(), pv: r.PV})
		case r.Phase == PhaseBound && !claimHere:
			o.set(r, PhaseReleased, "claim released: its PersistentVolume is retained for it")
		case r.Phase == PhaseReleased && claimHere && !w.ops.deleting(r):
			o.set(r, PhaseBound, "claim bound again to the PersistentVolume it released")
		}
	}
}

func (o *outcome) set(r record, phase Phase, msg string) {
	r.Phase = phase
	o.recs[r.PV] = r
	o.events = append(o.events, event{msg: msg, claim: r.claim(), pv: r.PV})
}

// bindUsed matches every claim a pod uses that has no Bound record, or
// else provisions it.
func (o *outcome) bindUsed(w world) {
	used := usedClaims(w.pods)
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
// terminated uses.
func usedClaims(pods []*v1.Pod) map[string]bool {
	used := map[string]bool{}
	for _, pod := range pods {
		if source.Terminated(pod) {
			continue
		}
		for _, vol := range pod.Spec.Volumes {
			if pvc := vol.PersistentVolumeClaim; pvc != nil {
				used[pod.Namespace+"/"+pvc.ClaimName] = true
			}
		}
	}
	return used
}
