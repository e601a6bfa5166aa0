package manifest

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// settleDelay is how long a file must stay unchanged before content that
// drops something in force is believed.
const settleDelay = 750 * time.Millisecond

// The settle rules. A file written in place (scp, curl > f, a slow pipe, a
// writer that crashed) can be read half-written: truncated YAML usually
// still parses, with fewer pods, fewer volumes or fewer keys, and believing
// it would tear volumes down, delete emptyDir data or empty a configMap
// volume. So what a file's new content drops — an object, a key of a
// ConfigMap or Secret, a volume of a pod — stays in force until the file has
// been unchanged for settleDelay, while what it adds or edits takes effect
// at once; deleting the file still takes effect at once. A drop is judged
// against the version in force, whichever file defined it: an object that
// comes to a file from another one is an edit like any other.
//
// At start the last good content is unknown — the volumes on disk may hold
// more than the file now says — so the first content of a file that was
// present at start waits whole, if the file changed less than settleDelay
// ago.
//
// A file renamed into place is read at once (see changes), yet its drops
// wait all the same, though such a file is most likely complete. The
// rename only shows that someone moved the file in, not that its writer
// was done: `curl -o x.tmp … & mv x.tmp x.yaml`, or a writer that keeps
// the file open, goes on writing into the name renamed in, and a drop
// believed early deletes data for good. Deleting the file is the prompt
// way to remove its objects; a drop written by rename costs settleDelay,
// while additions and edits, the common case, apply at once. The scanner
// does not track how a file arrived, so the rule is the same for all.

// settling reports whether f changed less than settleDelay before now.
func settling(f *fileState, now time.Time) bool {
	return now.Before(f.changedAt.Add(settleDelay))
}

// unchanged reports whether f's content in force is its latest parse,
// whole: nothing of it waits, and it was not read again with other bytes.
func unchanged(f *fileState) bool {
	return len(f.parsed) == len(f.good) && (len(f.good) == 0 || &f.parsed[0] == &f.good[0])
}

// keep returns what of f's latest parse is in force now, and whether part
// of it waits for f to settle. The objects of the parse at the indexes of
// moving stay with the file that holds them (see merge). While f settles,
// an object whose new version drops part of the version in force (inForce)
// keeps that version, and the objects f holds that the parse lacks stay.
// When nothing differs it returns f.parsed itself.
func keep(f *fileState, moving map[int]bool, settles bool, inForce map[key]*object) (next []object, held bool) {
	next = make([]object, 0, len(f.parsed)+len(f.good))
	defined := make(map[key]bool, len(f.parsed))
	for i, o := range f.parsed {
		defined[o.key] = true
		if moving[i] {
			continue
		}
		if prev, ok := inForce[o.key]; settles && ok && dropsParts(prev.obj, o.obj) {
			at := o.at
			o, held = *prev, true
			o.at = at
		}
		next = append(next, o)
	}
	for _, o := range f.good {
		if settles && !defined[o.key] {
			next, held = append(next, o), true
		}
	}
	if !held && len(moving) == 0 {
		return f.parsed, false
	}
	return next, held
}

// dropsParts reports whether next lacks a key of a ConfigMap or Secret, or a
// volume of a Pod, that prev has.
func dropsParts(prev, next runtime.Object) bool {
	switch p := prev.(type) {
	case *v1.ConfigMap:
		n, ok := next.(*v1.ConfigMap)
		return !ok || lacksKey(p.Data, n.Data) || lacksKey(p.BinaryData, n.BinaryData)
	case *v1.Secret:
		n, ok := next.(*v1.Secret)
		return !ok || lacksKey(p.Data, n.Data)
	case *v1.Pod:
		n, ok := next.(*v1.Pod)
		if !ok {
			return true
		}
		names := make(map[string]bool, len(n.Spec.Volumes))
		for _, v := range n.Spec.Volumes {
			names[v.Name] = true
		}
		for _, v := range p.Spec.Volumes {
			if !names[v.Name] {
				return true
			}
		}
	}
	return false
}

func lacksKey[V any](prev, next map[string]V) bool {
	for k := range prev {
		if _, ok := next[k]; !ok {
			return true
		}
	}
	return false
}
