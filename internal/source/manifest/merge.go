package manifest

import (
	"fmt"
	"maps"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// origin is where an object in force was defined.
type origin struct {
	file string
	at   where
}

func (o origin) String() string {
	if o.file == "" {
		return o.at.position()
	}
	return o.file + ", " + o.at.position()
}

// claims records which object keys and pod UIDs are taken, and by whom.
type claims struct {
	keys map[key]origin
	uids map[types.UID]origin
}

// newClaims returns empty claims with room for about n objects.
func newClaims(n int) *claims {
	return &claims{keys: make(map[key]origin, n), uids: make(map[types.UID]origin, n)}
}

// conflict says why o cannot be added, or returns "" when it can.
func (c *claims) conflict(o object) string { return c.conflictOutside(o, "\x00") }

// conflictOutside is conflict, ignoring the claims of file itself.
func (c *claims) conflictOutside(o object, file string) string {
	if prev, ok := c.keys[o.key]; ok && prev.file != file {
		return fmt.Sprintf("duplicate %s: already defined in %s", o.key, prev)
	}
	if pod, ok := o.obj.(*v1.Pod); ok {
		if prev, ok := c.uids[pod.UID]; ok && prev.file != file {
			return fmt.Sprintf("pod uid %q is already used by the pod in %s", pod.UID, prev)
		}
	}
	return ""
}

// release drops the claims file holds on objs. A file only ever claims
// the objects of its own content, so releasing its last good content frees
// all it holds, at the cost of its own objects rather than of every claim.
func (c *claims) release(file string, objs []object) {
	for _, o := range objs {
		if c.keys[o.key].file == file {
			delete(c.keys, o.key)
		}
		if pod, ok := o.obj.(*v1.Pod); ok && c.uids[pod.UID].file == file {
			delete(c.uids, pod.UID)
		}
	}
}

// owns reports whether file holds the claim of o.
func (c *claims) owns(file string, o object) bool {
	prev, ok := c.keys[o.key]
	return ok && prev.file == file && prev.at == o.at
}

func (c *claims) add(file string, o object) {
	c.keys[o.key] = origin{file: file, at: o.at}
	if pod, ok := o.obj.(*v1.Pod); ok {
		c.uids[pod.UID] = origin{file: file, at: o.at}
	}
}

// check returns a fatal problem for every object of file's objs that
// conflicts with another file's claims, claiming nothing.
func (c *claims) check(file string, objs []object) []problem {
	var ps []problem
	for _, o := range objs {
		if msg := c.conflictOutside(o, file); msg != "" {
			ps = append(ps, problem{msg: msg, at: o.at})
		}
	}
	return ps
}

// duplicatesWithin finds the objects of one file that repeat an earlier one.
func duplicatesWithin(objs []object) []problem {
	c := newClaims(len(objs))
	var ps []problem
	for _, o := range objs {
		if msg := c.conflict(o); msg != "" {
			ps = append(ps, problem{msg: msg, at: o.at})
			continue
		}
		c.add("", o)
	}
	return ps
}

// settleDelay is how long a file must stay unchanged before content that
// drops something its last good content had is believed.
const settleDelay = 750 * time.Millisecond

// holdBack reports whether f's new content must wait until the file has
// been unchanged for settleDelay. A file written in place (scp, curl > f, a
// slow pipe, a writer that crashed) can be read half-written: truncated
// YAML usually still parses, with fewer pods, fewer volumes or fewer keys,
// and believing it would tear volumes down, delete emptyDir data or empty a
// configMap volume. So content that drops an object, a key of a ConfigMap
// or Secret, or a volume of a pod waits; additions and edits take effect at
// once; deleting the file still takes effect at once. At start the last
// good content is unknown — the volumes on disk may hold more than the file
// now says — so the first content of a file that was present at start
// waits too, if the file changed less than settleDelay ago.
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
func (sc *scanner) holdBack(f *fileState) bool {
	switch {
	case f.accepted && unchanged(f):
		return false
	case f.accepted && !dropsContent(f.good, f.parsed):
		return false
	case !f.accepted && !f.initial:
		return false // a file new since start: nothing to drop
	}
	due := f.changedAt.Add(settleDelay)
	if !sc.now().Before(due) {
		return false
	}
	if sc.recheck.IsZero() || due.Before(sc.recheck) {
		sc.recheck = due
	}
	return true
}

// unchanged reports whether f's content is the one in force: not read
// again with other bytes since it was accepted.
func unchanged(f *fileState) bool {
	return len(f.parsed) == len(f.good) && (len(f.good) == 0 || &f.parsed[0] == &f.good[0])
}

// dropsContent reports whether next lacks an object that prev has, or a
// part of one (see dropsParts).
func dropsContent(prev, next []object) bool {
	have := make(map[key]runtime.Object, len(next))
	for _, o := range next {
		have[o.key] = o.obj
	}
	for _, o := range prev {
		n, ok := have[o.key]
		if !ok || dropsParts(o.obj, n) {
			return true
		}
	}
	return false
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

// merge decides which content of each file is in force. What is in force
// keeps its claims: a file whose new content defines an object (or pod UID)
// that another file already defines is rejected — whichever sorts first —
// and keeps its last good content, so a copy of a manifest dropped next to
// it can never take a running pod over and tear its volumes down. Among
// files that are new at once, the lexically first wins. It returns the
// objects in force.
func (sc *scanner) merge() []object {
	names := slices.Sorted(maps.Keys(sc.files))
	c := newClaims(len(names))
	for _, name := range names {
		for _, o := range sc.files[name].good {
			if c.conflict(o) == "" {
				c.add(name, o)
			}
		}
	}
	sc.recheck, sc.held = time.Time{}, nil
	for _, name := range names {
		f := sc.files[name]
		f.conflicts = nil
		if !f.parsedOK() {
			continue
		}
		if sc.holdBack(f) {
			sc.held = append(sc.held, name)
			continue
		}
		if f.conflicts = c.check(name, f.parsed); f.conflicts == nil {
			c.release(name, f.good)
			f.good, f.accepted = f.parsed, true
			for _, o := range f.good {
				c.add(name, o)
			}
		}
	}
	out := make([]object, 0, len(c.keys))
	for _, name := range names {
		for _, o := range sc.files[name].good {
			if c.owns(name, o) {
				out = append(out, o)
			}
		}
	}
	return out
}
