package reconciler

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/dsw"
)

// passState is what one pass carries to the next; only Run's goroutine
// uses it.
type passState struct {
	// desired and actual collect the pods that changed in either world
	// since the last pass.
	desired, actual *dsw.Changes
	// populated is what the last pass saw of Desired.Populated.
	populated bool
}

// passPlan is what planPass decided.
type passPlan struct {
	actions   []action
	populated bool
	// pods are the pods looked at; nil when the pass looked at every pod.
	pods map[types.UID]bool
}

// looked reports whether the pass looked at the pod of an executor key
// ("podUID/volume", "podUID/"); keys of other operations count as looked
// at only by a full pass.
func (p passPlan) looked(key string) bool {
	if p.pods == nil {
		return true
	}
	uid, _, _ := strings.Cut(key, "/")
	return p.pods[types.UID(uid)]
}

// planPass plans one pass. plan's decisions for a pod depend only on that
// pod's entries in both worlds and on whether the desired state is
// populated, so a pass needs to look only at the pods that changed since
// the last one and at those an operation of which ended (it may have
// failed, or found its plan stale) or whose backoff expired since. Every
// other pod either had nothing to do when last looked at and still has
// nothing to do, or has its operations still queued or running: planning
// them again would start nothing (the executor runs one operation per key),
// and the executor reports each one's end. So a burst of 440 queued
// operations is not planned again on every pass. A full pass looks at
// every pod: the first one, one the resync timer asks for (the safety net),
// the pass after the desired state became populated, and any pass after a
// change set overflowed.
func (r *Reconciler) planPass(full bool) passPlan {
	populated := r.cfg.Desired.Populated()
	// Take the changes before reading the worlds: a change made after the
	// read is then still in the sets for the next pass.
	desired, allDesired := r.passes.desired.Take()
	actual, allActual := r.passes.actual.Take()
	full = full || allDesired || allActual || populated != r.passes.populated
	r.passes.populated = populated
	ended := r.takeEnded()
	if full {
		return passPlan{actions: plan(r.fullSnapshot(populated)), populated: populated}
	}
	pods := ended
	for _, uid := range slices.Concat(desired, actual) {
		pods[uid] = true
	}
	return passPlan{actions: plan(r.snapshotOf(pods, populated)), populated: populated, pods: pods}
}

// fullSnapshot reads both worlds whole.
func (r *Reconciler) fullSnapshot(populated bool) snapshot {
	return snapshot{
		desired:   r.cfg.Desired.Pods(),
		actual:    r.cfg.Actual.Volumes(),
		podDirs:   r.cfg.Actual.PodDirs(),
		populated: populated,
		removed:   r.cfg.Desired.RemovedPods(),
	}
}

// snapshotOf reads the entries of some pods in both worlds, in the order
// fullSnapshot has them.
func (r *Reconciler) snapshotOf(pods map[types.UID]bool, populated bool) snapshot {
	s := snapshot{populated: populated, removed: map[types.UID]bool{}}
	for _, uid := range sortedUIDs(pods) {
		if r.cfg.Desired.Removed(uid) {
			s.removed[uid] = true
		}
		if p, ok := r.cfg.Desired.Pod(uid); ok {
			s.desired = append(s.desired, p)
		}
		vols, _ := r.cfg.Actual.PodVolumes(uid)
		s.actual = append(s.actual, vols...)
		if d, ok := r.cfg.Actual.PodDir(uid); ok {
			s.podDirs = append(s.podDirs, d)
		}
	}
	dsw.SortPods(s.desired)
	return s
}

func sortedUIDs(set map[types.UID]bool) []types.UID {
	out := make([]types.UID, 0, len(set))
	for uid := range set {
		out = append(out, uid)
	}
	slices.Sort(out)
	return out
}
