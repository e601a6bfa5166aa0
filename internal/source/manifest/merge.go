package manifest

import (
	"fmt"
	"maps"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// origin is where an object in force was defined.
type origin struct {
	file string
	at   where
}

// String is "line L" within the same file, "file:L" in another, with the
// item of a List.
func (o origin) String() string {
	s := fmt.Sprintf("line %d", o.at.line)
	if o.file != "" {
		s = fmt.Sprintf("%s:%d", o.file, o.at.line)
	}
	if o.at.item > 0 {
		s += fmt.Sprintf(" (item %d)", o.at.item)
	}
	return s
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

// conflict says why o cannot be added, or returns nil when it can.
func (c *claims) conflict(o object) error {
	if prev, ok := c.keys[o.key]; ok {
		return duplicateKey(o.key, prev)
	}
	if pod, ok := o.obj.(*v1.Pod); ok {
		if prev, ok := c.uids[pod.UID]; ok {
			return duplicateUID(pod.UID, prev)
		}
	}
	return nil
}

func duplicateKey(k key, prev origin) error {
	return fmt.Errorf("duplicate %s: already defined at %s", k, prev)
}

func duplicateUID(uid types.UID, prev origin) error {
	return fmt.Errorf("pod uid %q is already used by the pod at %s", uid, prev)
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

// duplicatesWithin finds the objects of one file that repeat an earlier one.
func duplicatesWithin(objs []object) []problem {
	c := newClaims(len(objs))
	var ps []problem
	for _, o := range objs {
		if err := c.conflict(o); err != nil {
			ps = append(ps, problem{msg: err.Error(), line: o.at.line, at: o.at})
			continue
		}
		c.add("", o)
	}
	return ps
}

// replace makes file hold next instead of prev, and reports whether it let
// go of a key or pod UID that prev held.
func (c *claims) replace(file string, prev, next []object) (freed bool) {
	c.release(file, prev)
	for _, o := range next {
		c.add(file, o)
	}
	for _, o := range prev {
		pod, isPod := o.obj.(*v1.Pod)
		if c.keys[o.key].file != file || (isPod && c.uids[pod.UID].file != file) {
			return true
		}
	}
	return false
}

// merge decides what of each file's content is in force, and returns the
// objects in force.
//
// A pod is its namespace and name, whichever file holds it. What is in
// force keeps its claim: a file whose new content defines an object (or pod
// UID) that another file holds and still defines is a duplicate, rejected
// whole whichever sorts first, and keeps its last good content, so a draft
// copy of a manifest dropped next to it can never take a running pod over.
// An object that the file holding it no longer defines is moving: it stays
// with that file until the file lets it go (its drop settled, or the file
// deleted), and passes to its new file in the same merge, so that a move
// between files, in either order, is one step that tears nothing down.
// Among files that are new at once, the lexically first wins.
//
// A file that lets a claim go can resolve a duplicate or a move of a file
// looked at before it, so merge looks again at the files left waiting until
// a pass lets nothing go. A file never takes back, in one merge, a claim it
// let go (it lets go only what its latest content lacks), so the passes
// end. names are the files' names, sorted.
func (sc *scanner) merge(names []string) []object {
	m := &merger{sc: sc, c: newClaims(len(names)), now: sc.now(), latest: map[string]index{}, held: map[string]bool{}}
	var todo []string
	for _, name := range names {
		f := sc.files[name]
		f.conflicts = nil
		for _, o := range f.good {
			if m.c.conflict(o) == nil {
				m.c.add(name, o)
			}
		}
		if f.parsedOK() && !unchanged(f) {
			todo = append(todo, name)
		}
	}
	for len(todo) > 0 {
		var waiting []string
		freed := false
		for _, name := range todo {
			decided, lets := m.take(name, sc.files[name])
			freed = freed || lets
			if !decided {
				waiting = append(waiting, name)
			}
		}
		if !freed {
			break
		}
		todo = waiting
	}
	sc.held, sc.recheck = slices.Sorted(maps.Keys(m.held)), m.recheck
	sc.claims = m.c
	return sc.inForceNow(names, m.c)
}

// inForceNow returns the objects the files hold, in file order, and
// remembers them for the next merge.
func (sc *scanner) inForceNow(names []string, c *claims) []object {
	out := make([]object, 0, len(c.keys))
	sc.inForce = make(map[key]*object, len(c.keys))
	for _, name := range names {
		good := sc.files[name].good
		for i, o := range good {
			if c.owns(name, o) {
				out = append(out, o)
				sc.inForce[o.key] = &good[i] // content is replaced, never modified
			}
		}
	}
	return out
}

// merger is the state of one merge.
type merger struct {
	sc  *scanner
	c   *claims
	now time.Time
	// latest indexes, by file, what the file's latest content defines.
	latest map[string]index
	// held are the files part of whose content waits to settle; recheck is
	// the earliest time one of them is due.
	held    map[string]bool
	recheck time.Time
}

// index is the keys and pod UIDs one file's content defines.
type index struct {
	keys map[key]bool
	uids map[types.UID]bool
}

// take decides what of f's latest parse is in force. It reports whether
// that is decided for this merge (no object of it waits for another file
// to let it go) and whether f let go of a claim.
func (m *merger) take(name string, f *fileState) (decided, freed bool) {
	settles := settling(f, m.now)
	if settles && f.initial && !f.accepted {
		m.hold(name, f) // the first content of a file present at start waits whole
		return true, false
	}
	dups, moving := m.classify(name, f.parsed)
	if f.conflicts = dups; dups != nil {
		return false, false
	}
	next, held := keep(f, moving, settles, m.sc.inForce)
	if held {
		m.hold(name, f)
	}
	freed = m.c.replace(name, f.good, next)
	f.good, f.accepted = next, true
	return len(moving) == 0, freed
}

// hold records that part of f's content waits for f to settle.
func (m *merger) hold(name string, f *fileState) {
	m.held[name] = true
	if due := f.changedAt.Add(settleDelay); m.recheck.IsZero() || due.Before(m.recheck) {
		m.recheck = due
	}
}

// classify finds the objects of file name's objs whose key or pod UID
// another file holds: duplicates, when that file still defines them, and
// otherwise moving ones, by index in objs.
func (m *merger) classify(name string, objs []object) (dups []problem, moving map[int]bool) {
	for i, o := range objs {
		if prev, ok := m.c.keys[o.key]; ok && prev.file != name {
			if m.defines(prev.file).keys[o.key] {
				dups = append(dups, problem{msg: duplicateKey(o.key, prev).Error(), line: o.at.line, at: o.at})
				continue
			}
			moving = markMoving(moving, i)
		}
		pod, ok := o.obj.(*v1.Pod)
		if !ok {
			continue
		}
		if prev, ok := m.c.uids[pod.UID]; ok && prev.file != name {
			if m.defines(prev.file).uids[pod.UID] {
				dups = append(dups, problem{msg: duplicateUID(pod.UID, prev).Error(), line: o.at.line, at: o.at})
				continue
			}
			moving = markMoving(moving, i)
		}
	}
	return dups, moving
}

func markMoving(moving map[int]bool, i int) map[int]bool {
	if moving == nil {
		moving = map[int]bool{}
	}
	moving[i] = true
	return moving
}

// defines returns what file's latest content defines: its latest parse, or
// its content in force when that parse failed; nothing for a file going
// with the directory it was in.
func (m *merger) defines(file string) index {
	if ix, ok := m.latest[file]; ok {
		return ix
	}
	f := m.sc.files[file]
	objs := f.good
	switch {
	case f.orphaned && !f.missingSince.IsZero():
		objs = nil // its directory was replaced by one without it (see refresh)
	case f.parsedOK():
		objs = f.parsed
	}
	ix := index{keys: make(map[key]bool, len(objs)), uids: map[types.UID]bool{}}
	for _, o := range objs {
		ix.keys[o.key] = true
		if pod, ok := o.obj.(*v1.Pod); ok {
			ix.uids[pod.UID] = true
		}
	}
	m.latest[file] = ix
	return ix
}
