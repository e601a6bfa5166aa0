package binder

import (
	"maps"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// observations are what the binding loop has seen of the inner source
// since the agent started: which claims and PersistentVolumes it listed,
// and since when those it listed once are missing. They live in memory
// only, on purpose: a removal counts only when it was seen while the agent
// ran (a claim missing at start may be on a disk that is not mounted yet),
// so a restart forgets every removal in progress, which then waits for the
// object to come back and go again.
type observations struct {
	claimsSeen map[claimKey]bool
	pvsSeen    map[string]bool
	// podsSeen are the pods listed since start, and podsGone, for those
	// not listed now, since when: the removal of a claim made for a pod's
	// ephemeral volume follows its pod's.
	podsSeen map[types.UID]bool
	podsGone map[types.UID]time.Time
	// claimsGone and pvsGone hold, for those seen and now missing, when
	// they were first missing; a return clears it.
	claimsGone map[claimKey]time.Time
	pvsGone    map[string]time.Time
	// snapsSeen and snapsGone are the same for VolumeSnapshots.
	snapsSeen map[snapKey]bool
	snapsGone map[snapKey]time.Time
	// emptied is set while the inner source lists no pods, claims,
	// PersistentVolumes, StorageClasses or VolumeSnapshots at all: a directory replaced, emptied by a tool or
	// not mounted yet. Nothing is counted as removed meanwhile, and clocks
	// of earlier removals start again once it lists something.
	emptied bool
}

// observe returns what prev and the synced source w add up to, at w.now.
// It forgets what matters no more: claims and PersistentVolumes that are
// neither listed nor in a record of recs. Pure: prev is not modified.
func observe(prev observations, w world, recs records) observations {
	next := observations{
		claimsSeen: maps.Clone(prev.claimsSeen), pvsSeen: maps.Clone(prev.pvsSeen),
		claimsGone: map[claimKey]time.Time{}, pvsGone: map[string]time.Time{},
		emptied: len(w.pods) == 0 && len(w.claims) == 0 && len(w.pvs) == 0 && len(w.classes) == 0 && len(w.snapshots) == 0,
	}
	next.snapsSeen, next.snapsGone = observeSnapshots(prev, w, next.emptied)
	if next.claimsSeen == nil {
		next.claimsSeen, next.pvsSeen = map[claimKey]bool{}, map[string]bool{}
	}
	next.podsSeen, next.podsGone = observePods(prev, w)
	claims := w.claimSet()
	for _, c := range w.claims {
		next.claimsSeen[keyOf(c)] = true
	}
	pvs := map[string]bool{}
	for _, pv := range w.pvs {
		next.pvsSeen[pv.Name] = true
		pvs[pv.Name] = true
	}
	for k := range next.claimsSeen {
		if !claims[k] && !recs.has(k) {
			delete(next.claimsSeen, k)
		}
	}
	for name := range next.pvsSeen {
		if _, ok := recs[name]; !ok && !pvs[name] {
			delete(next.pvsSeen, name)
		}
	}
	if next.emptied {
		return next
	}
	for k := range next.claimsSeen {
		if !claims[k] {
			next.claimsGone[k] = sinceOr(prev.claimsGone[k], w.now)
		}
	}
	for name := range next.pvsSeen {
		if !pvs[name] {
			next.pvsGone[name] = sinceOr(prev.pvsGone[name], w.now)
		}
	}
	return next
}

// observePods returns the pods seen since start, and since when those not
// listed now are missing, forgetting those no made claim names. Unlike a
// claim's, a pod's removal counts even while the source lists nothing: the
// source dropped it only once it believed the removal, and the pod's
// volumes are torn down at once.
func observePods(prev observations, w world) (map[types.UID]bool, map[types.UID]time.Time) {
	seen, gone := maps.Clone(prev.podsSeen), map[types.UID]time.Time{}
	if seen == nil {
		seen = map[types.UID]bool{}
	}
	listed := make(map[types.UID]bool, len(w.pods))
	for _, pod := range w.pods {
		seen[pod.UID], listed[pod.UID] = true, true
	}
	named := make(map[types.UID]bool, len(w.made))
	for _, m := range w.made {
		named[m.PodUID] = true
	}
	for uid := range seen {
		switch {
		case listed[uid]:
		case !named[uid]:
			delete(seen, uid)
		default:
			gone[uid] = sinceOr(prev.podsGone[uid], w.now)
		}
	}
	return seen, gone
}

func sinceOr(since, now time.Time) time.Time {
	if since.IsZero() {
		return now
	}
	return since
}

// observeSnapshots returns the VolumeSnapshots seen since start, and since
// when those not listed now are missing (none while the source lists
// nothing), forgetting those neither listed nor in a snapshot record.
func observeSnapshots(prev observations, w world, emptied bool) (map[snapKey]bool, map[snapKey]time.Time) {
	seen, gone := maps.Clone(prev.snapsSeen), map[snapKey]time.Time{}
	if seen == nil {
		seen = map[snapKey]bool{}
	}
	listed := make(map[snapKey]bool, len(w.snapshots))
	for _, s := range w.snapshots {
		seen[snapKeyOf(s)], listed[snapKeyOf(s)] = true, true
	}
	recorded := make(map[snapKey]bool, len(w.snapRecs))
	for _, r := range w.snapRecs {
		recorded[r.key()] = true
	}
	for k := range seen {
		switch {
		case listed[k]:
		case !recorded[k]:
			delete(seen, k)
		case !emptied:
			gone[k] = sinceOr(prev.snapsGone[k], w.now)
		}
	}
	return seen, gone
}
