package manifest

import (
	"cmp"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/source"
)

// The fast path. In a burst each new pod file is a batch of its own, and
// merging every file for each one made the merge O(files) per batch, as
// costly as parsing the file at a few hundred files. When the last result
// left everything decided and nothing of a batch can need a decision —
// each file read defines what it held, edited in ways that drop nothing,
// plus objects no file claims — merging every file would only put each
// file's new parse in force; fastResult does that for the files read
// alone. Anything else, a drop or a move above all, takes the full merge,
// which settle.go's rules decide: the fast path is only for what they
// take at once whatever the clock says.

// clean reports whether the result just built (by merging names, giving
// objs and st) leaves nothing to decide, so that the next result may
// build on it: the directory listed and whole, nothing held or due, the
// source synced without a problem, and every file's latest parse in force
// whole, each of its objects holding its key and pod UID.
func (sc *scanner) clean(names []string, objs []object, st source.Status) bool {
	if !sc.listed || sc.dirErr != nil || sc.orphans > 0 || sc.emptied || sc.moved ||
		len(sc.held) > 0 || !sc.recheck.IsZero() || !st.Synced || len(st.Errors) > 0 {
		return false
	}
	total := 0
	for _, name := range names {
		f := sc.files[name]
		if !f.accepted || !f.parsedOK() || !unchanged(f) || f.orphaned || len(f.conflicts) > 0 {
			return false
		}
		for _, o := range f.good {
			if !sc.claims.owns(name, o) || !ownsUID(sc.claims, name, o) {
				return false
			}
		}
		total += len(f.good)
	}
	return total == len(objs) && len(sc.inForce) == len(objs)
}

// ownsUID reports whether file holds the claim of o's pod UID, if o is a pod.
func ownsUID(c *claims, file string, o object) bool {
	pod, ok := o.obj.(*v1.Pod)
	return !ok || c.uids[pod.UID].file == file
}

// fastResult returns the snapshot of the files read since the last result
// (dirty) put in force, when every condition of the fast path holds, each
// checked here; otherwise nil, and the caller merges every file. The
// conditions:
//   - the last result was clean (see clean) and nothing was listed or
//     forgotten since;
//   - the directory is still listed and whole, nothing is held or due;
//   - every file read parsed without a problem, is not the first content
//     of a file present at start that is still settling (which waits
//     whole, see take), and defines
//     exactly the keys and pod UIDs it held (edits), plus keys and pod UIDs
//     no file claims (new objects; no two files of the batch share one);
//   - no edit drops a key of a ConfigMap or Secret or a volume of a pod.
//
// Status, Synced, Reason and Errors are then what merging every file
// gives: synced with no problem, as the last result was, with every file
// read accepted.
func (sc *scanner) fastResult() *snapshot {
	last := sc.last
	sc.last = nil // set again below only if this result is clean too
	if last == nil || sc.fullOnly || sc.fullNext || !sc.listed || sc.dirErr != nil || sc.orphans > 0 ||
		sc.emptied || sc.moved || len(sc.held) > 0 || !sc.recheck.IsZero() || !last.status.Synced ||
		len(last.status.Errors) > 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(sc.dirty))
	if !sc.canTakeAsIs(names) {
		return nil
	}
	snap := &snapshot{pods: last.pods, objects: last.objects, versions: last.versions,
		status: source.Status{Name: sourceName, Synced: true}}
	if len(names) > 0 {
		snap.objects, snap.versions = maps.Clone(last.objects), maps.Clone(last.versions)
	}
	var pods []*v1.Pod
	for _, name := range names {
		f := sc.files[name]
		sc.claims.replace(name, f.good, f.parsed) // frees nothing: checked
		f.good, f.accepted, f.conflicts = f.parsed, true, nil
		for i, o := range f.good {
			sc.inForce[o.key] = &f.good[i] // content is replaced, never modified
			snap.objects[o.key], snap.versions[o.key] = o.obj, o.version
			if pod, ok := o.obj.(*v1.Pod); ok {
				pods = append(pods, pod)
			}
		}
		sc.logFile(name, f)
	}
	if len(pods) > 0 {
		snap.pods = podsOf(last.pods, pods, sc.nodeName)
	}
	sc.fastResults++
	sc.last = snap
	return snap
}

// canTakeAsIs reports whether each file of names, read since the last
// result, can have its latest parse put in force as it is, with no
// other file's content looked at again (see fastResult).
func (sc *scanner) canTakeAsIs(names []string) bool {
	now := sc.now()
	newKeys := map[key]bool{}
	newUIDs := map[types.UID]bool{}
	for _, name := range names {
		f := sc.files[name]
		if f == nil || !f.parsedOK() || f.orphaned || len(f.parsed) == 0 ||
			(f.initial && !f.accepted && settling(f, now)) {
			return false
		}
		keys := make(map[key]bool, len(f.parsed))
		uids := map[types.UID]bool{}
		for _, o := range f.parsed {
			keys[o.key] = true
			if !sc.takesKey(name, o, newKeys) || !sc.takesUID(name, o, newUIDs, uids) {
				return false
			}
		}
		for _, o := range f.good { // what it held, it still defines
			if pod, ok := o.obj.(*v1.Pod); !keys[o.key] || (ok && !uids[pod.UID]) {
				return false
			}
		}
	}
	return true
}

// takesKey reports whether file name may put o in force at once: o is an
// edit of an object it holds that drops nothing of the version in force,
// or a new object no file claims and no other file of the batch defines.
func (sc *scanner) takesKey(name string, o object, newKeys map[key]bool) bool {
	prev, claimed := sc.claims.keys[o.key]
	switch {
	case claimed && prev.file != name:
		return false // a move or a duplicate
	case claimed:
		in := sc.inForce[o.key]
		return in != nil && !dropsParts(in.obj, o.obj)
	case newKeys[o.key]:
		return false // two files of the batch define it
	}
	newKeys[o.key] = true
	return true
}

// takesUID is takesKey for o's pod UID, if o is a pod; uids collects the
// UIDs the file's parse defines.
func (sc *scanner) takesUID(name string, o object, newUIDs, uids map[types.UID]bool) bool {
	pod, ok := o.obj.(*v1.Pod)
	if !ok {
		return true
	}
	uids[pod.UID] = true
	prev, claimed := sc.claims.uids[pod.UID]
	switch {
	case claimed:
		return prev.file == name
	case newUIDs[pod.UID]:
		return false
	}
	newUIDs[pod.UID] = true
	return true
}

// podsOf returns prev, the last list of the pods bound to nodeName, with
// the pods of changed (all pods, of the files read) in place of those of
// the same namespace and name, sorted as newSnapshot sorts them.
func podsOf(prev []*v1.Pod, changed []*v1.Pod, nodeName string) []*v1.Pod {
	replaced := make(map[types.NamespacedName]bool, len(changed))
	for _, pod := range changed {
		replaced[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}] = true
	}
	pods := make([]*v1.Pod, 0, len(prev)+len(changed))
	for _, pod := range prev {
		if !replaced[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}] {
			pods = append(pods, pod)
		}
	}
	for _, pod := range changed {
		if pod.Spec.NodeName == nodeName {
			pods = append(pods, pod)
		}
	}
	slices.SortFunc(pods, func(a, b *v1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	if len(pods) == 0 {
		return nil // as newSnapshot gives it: no pod is nil, not empty
	}
	return pods
}
