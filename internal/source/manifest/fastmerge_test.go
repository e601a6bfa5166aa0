package manifest

import (
	"encoding/base64"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
)

// spec is one object of a generated manifest: a ConfigMap or a Secret
// with data keys, or a pod with emptyDir volumes, an image, maybe an
// explicit UID and maybe a node (this one, named, or another).
type spec struct {
	pod    bool
	secret bool // not a pod: a Secret rather than a ConfigMap
	name   string
	keys   map[string]string // ConfigMap or Secret data
	vols   []string          // pod volumes
	image  string
	uid    string
	node   string // pod spec.nodeName; "" is this node
}

func (s spec) yaml() string {
	if !s.pod {
		var b strings.Builder
		kind := "ConfigMap"
		if s.secret {
			kind = "Secret"
		}
		fmt.Fprintf(&b, "apiVersion: v1\nkind: %s\nmetadata: {name: %s}\ndata:\n", kind, s.name)
		for _, k := range slices.Sorted(maps.Keys(s.keys)) {
			v := s.keys[k]
			if s.secret {
				v = base64.StdEncoding.EncodeToString([]byte(v))
			}
			fmt.Fprintf(&b, "  %s: %s\n", k, v)
		}
		if len(s.keys) == 0 {
			b.WriteString("  {}\n")
		}
		return b.String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n", s.name)
	if s.uid != "" {
		fmt.Fprintf(&b, "  uid: %s\n", s.uid)
	}
	fmt.Fprintf(&b, "spec:\n  containers:\n  - {name: app, image: %s}\n", s.image)
	if s.node != "" {
		fmt.Fprintf(&b, "  nodeName: %s\n", s.node)
	}
	if len(s.vols) > 0 {
		b.WriteString("  volumes:\n")
		for _, v := range s.vols {
			fmt.Fprintf(&b, "  - {name: %s, emptyDir: {}}\n", v)
		}
	}
	return b.String()
}

func (s spec) clone() spec {
	s.keys = maps.Clone(s.keys)
	s.vols = slices.Clone(s.vols)
	return s
}

// twin drives two scanners of one directory on one clock: one with the
// fast path, one that always merges every file.
type twin struct {
	t          *testing.T
	seed       uint64
	rnd        *rand.Rand
	dir        string
	clock      time.Time
	fast, full *scanner
	// files is what the generator last wrote to each file (nil: broken);
	// lists are the files written as a v1 List.
	files map[string][]spec
	lists map[string]bool
	// seen counts what the batches covered (see cover); nodeEdit is set
	// when the batch being made moves a pod to or from another node.
	seen     map[string]int
	nodeEdit bool
	// listEdit is set when the batch being made writes a List.
	listEdit bool
}

func newTwin(t *testing.T, seed uint64) *twin {
	w := &twin{t: t, seed: seed, rnd: rand.New(rand.NewPCG(seed, 1)), dir: t.TempDir(), clock: time.Now(), files: map[string][]spec{}, lists: map[string]bool{}, seen: map[string]int{}}
	w.fast = newScanner(w.dir, "node-1", zap.NewNop())
	w.full = newScanner(w.dir, "node-1", zap.NewNop())
	w.full.fullOnly = true
	for _, sc := range []*scanner{w.fast, w.full} {
		sc.now = func() time.Time { return w.clock }
	}
	return w
}

// both runs op on each scanner and checks that they give the same.
func (w *twin) both(what string, op func(sc *scanner) *snapshot) {
	w.t.Helper()
	before := w.fast.fastResults
	a, b := op(w.fast), op(w.full)
	w.same(what, a, b)
	w.cover(what, w.fast.fastResults > before)
}

// cover counts the batches that covered each case, for the test to check
// that the generator makes each case it is meant to ("fast:": and the fast
// path made the result).
func (w *twin) cover(what string, fast bool) {
	seen := map[string]bool{}
	defer func() {
		for c, ok := range seen {
			if ok {
				w.seen[c]++
			}
		}
	}()
	for _, c := range []string{"move ", "forgotten and added again"} {
		seen[c] = strings.Contains(what, c)
	}
	seen["pod edited to or from another node"] = w.nodeEdit
	seen["fast: pod edited to or from another node"] = w.nodeEdit && fast
	seen["List written"] = w.listEdit
	seen["fast: List written"] = w.listEdit && fast
	w.nodeEdit, w.listEdit = false, false
	for _, o := range w.fast.inForce {
		switch obj := o.obj.(type) {
		case *v1.Pod:
			if obj.Spec.NodeName != w.fast.nodeName {
				seen["pod of another node in force"] = true
			}
		case *v1.Secret:
			seen["Secret in force"] = true
		}
		if o.at.item > 0 {
			seen["List item in force"] = true
		}
	}
}

func (w *twin) same(what string, a, b *snapshot) {
	w.t.Helper()
	what = fmt.Sprintf("seed %d: %s", w.seed, what)
	if !reflect.DeepEqual(a.status, b.status) {
		w.t.Fatalf("%s: status %+v, merging every file %+v", what, a.status, b.status)
	}
	if !maps.Equal(a.versions, b.versions) {
		w.t.Fatalf("%s: versions %v, merging every file %v", what, a.versions, b.versions)
	}
	if !reflect.DeepEqual(a.objects, b.objects) {
		w.t.Fatalf("%s: objects differ from merging every file's", what)
	}
	if !reflect.DeepEqual(podNames(a.pods), podNames(b.pods)) || !reflect.DeepEqual(a.pods, b.pods) {
		w.t.Fatalf("%s: pods %v (nil: %v), merging every file %v (nil: %v)",
			what, podNames(a.pods), a.pods == nil, podNames(b.pods), b.pods == nil)
	}
	if !slices.Equal(w.fast.held, w.full.held) || !w.fast.recheck.Equal(w.full.recheck) {
		w.t.Fatalf("%s: held %v until %v, merging every file %v until %v",
			what, w.fast.held, w.fast.recheck, w.full.held, w.full.recheck)
	}
	if len(w.fast.inForce) != len(w.full.inForce) {
		w.t.Fatalf("%s: %d objects in force, merging every file %d", what, len(w.fast.inForce), len(w.full.inForce))
	}
	for k, o := range w.full.inForce {
		if f := w.fast.inForce[k]; f == nil || f.version != o.version || f.at != o.at {
			w.t.Fatalf("%s: %s in force differs", what, k)
		}
	}
	w.sameState(what)
}

// sameState checks that the two scanners hold the same claims and the same
// state of each file: content in force, acceptance, problems and conflicts.
func (w *twin) sameState(what string) {
	w.t.Helper()
	a, b := w.fast, w.full
	if (a.claims == nil) != (b.claims == nil) {
		w.t.Fatalf("%s: claims %v, merging every file %v", what, a.claims != nil, b.claims != nil)
	}
	if a.claims != nil && (!maps.Equal(a.claims.keys, b.claims.keys) || !maps.Equal(a.claims.uids, b.claims.uids)) {
		w.t.Fatalf("%s: claims %v %v, merging every file %v %v", what, a.claims.keys, a.claims.uids, b.claims.keys, b.claims.uids)
	}
	if names := slices.Sorted(maps.Keys(a.files)); !slices.Equal(names, slices.Sorted(maps.Keys(b.files))) {
		w.t.Fatalf("%s: files %v, merging every file %v", what, names, slices.Sorted(maps.Keys(b.files)))
	}
	for name, fb := range b.files {
		fa := a.files[name]
		if fa.accepted != fb.accepted || fa.initial != fb.initial || fa.read != fb.read || !fa.changedAt.Equal(fb.changedAt) {
			w.t.Fatalf("%s: %s accepted %v initial %v read %v changed %v, merging every file %v %v %v %v", what, name,
				fa.accepted, fa.initial, fa.read, fa.changedAt, fb.accepted, fb.initial, fb.read, fb.changedAt)
		}
		if ga, gb := objectsAt(fa.good), objectsAt(fb.good); !slices.Equal(ga, gb) {
			w.t.Fatalf("%s: %s holds %v, merging every file %v", what, name, ga, gb)
		}
		if pa, pb := problemsOf(name, fa), problemsOf(name, fb); !slices.Equal(pa, pb) {
			w.t.Fatalf("%s: %s problems %q, merging every file %q", what, name, pa, pb)
		}
	}
}

func objectsAt(objs []object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, fmt.Sprintf("%s@%+v=%s", o.key, o.at, o.version))
	}
	return out
}

func problemsOf(name string, f *fileState) []string {
	var out []string
	for _, p := range f.allProblems() {
		out = append(out, p.format(name))
	}
	return out
}

var twinFiles = []string{"a.yaml", "b.yaml", "c.yml", "d.yaml", "e.json.yaml", "f.yaml"}

func (w *twin) pick(list []string) string { return list[w.rnd.IntN(len(list))] }

// freshObject returns an object that no file defines now, or an object
// some file does (a duplicate or a move) one time in ten.
func (w *twin) freshObject() spec {
	defined := map[string]bool{}
	for _, specs := range w.files {
		for _, s := range specs {
			defined[s.name] = true
		}
	}
	for range 20 {
		s := w.randomObject()
		if !defined[s.name] || w.rnd.IntN(10) == 0 {
			return s
		}
	}
	return w.randomObject()
}

func (w *twin) randomObject() spec {
	if n := w.rnd.IntN(10); n < 6 {
		s := spec{name: fmt.Sprintf("cm%d", w.rnd.IntN(12)), keys: map[string]string{}}
		if n < 2 {
			s.secret, s.name = true, fmt.Sprintf("s%d", w.rnd.IntN(6))
		}
		for _, k := range []string{"a", "b", "c"} {
			if w.rnd.IntN(2) == 0 {
				s.keys[k] = fmt.Sprintf("v%d", w.rnd.IntN(3))
			}
		}
		return s
	}
	s := spec{pod: true, name: fmt.Sprintf("p%d", w.rnd.IntN(8)), image: fmt.Sprintf("img%d", w.rnd.IntN(3))}
	for _, v := range []string{"v0", "v1", "v2"} {
		if w.rnd.IntN(2) == 0 {
			s.vols = append(s.vols, v)
		}
	}
	if w.rnd.IntN(5) == 0 {
		s.uid = fmt.Sprintf("uid-%d", w.rnd.IntN(3)) // shared UIDs: conflicts
	}
	s.node = w.randomNode()
	return s
}

// randomNode returns a pod's spec.nodeName: mostly unset (this node), at
// times this node by name, at times another node.
func (w *twin) randomNode() string {
	switch n := w.rnd.IntN(8); {
	case n < 2:
		return "node-2"
	case n < 3:
		return "node-1"
	}
	return ""
}

// grow edits one object of specs without dropping anything, or adds one.
func (w *twin) grow(specs []spec) []spec {
	out := make([]spec, len(specs))
	for i, s := range specs {
		out[i] = s.clone()
	}
	if len(out) == 0 || w.rnd.IntN(3) == 0 {
		return append(out, w.freshObject())
	}
	s := &out[w.rnd.IntN(len(out))]
	switch {
	case !s.pod:
		s.keys[w.pick([]string{"a", "b", "c", "d"})] = fmt.Sprintf("v%d", w.rnd.IntN(3))
	case w.rnd.IntN(3) == 0: // bound to another node, or back to this one
		node := w.pick([]string{"", "node-1", "node-2"})
		w.nodeEdit = w.nodeEdit || (node == "node-2") != (s.node == "node-2")
		s.node = node
	case w.rnd.IntN(2) == 0:
		s.image = fmt.Sprintf("img%d", w.rnd.IntN(3))
	default:
		if v := w.pick([]string{"v0", "v1", "v2", "v3"}); !slices.Contains(s.vols, v) {
			s.vols = append(s.vols, v)
		}
	}
	return out
}

// shrink drops a part of an object of specs, or an object.
func (w *twin) shrink(specs []spec) []spec {
	out := slices.Clone(specs)
	if len(out) == 0 {
		return out
	}
	i := w.rnd.IntN(len(out))
	s := out[i].clone()
	switch {
	case w.rnd.IntN(3) == 0:
		return slices.Delete(out, i, i+1)
	case !s.pod && len(s.keys) > 0:
		delete(s.keys, w.pick(slices.Sorted(maps.Keys(s.keys))))
	case s.pod && len(s.vols) > 0:
		s.vols = s.vols[1:]
	}
	out[i] = s
	return out
}

// write writes specs to file name: as documents, or, for a file of
// lists (which one write in eight turns on or off), as a v1 List, at
// times followed by its last object as a document of its own.
func (w *twin) write(name string, specs []spec) {
	if w.rnd.IntN(8) == 0 {
		w.lists[name] = !w.lists[name]
	}
	var docs []string
	items := specs
	if w.lists[name] && len(specs) > 0 {
		if len(specs) > 1 && w.rnd.IntN(3) == 0 {
			items = specs[:len(specs)-1]
		}
		docs = append(docs, listYAML(items))
		w.listEdit = true
		items = specs[len(items):]
	}
	for _, s := range items {
		docs = append(docs, s.yaml())
	}
	writeFresh(w.t, w.dir, name, strings.Join(docs, "---\n"))
	w.files[name] = specs
}

// listYAML renders specs as the items of a v1 List.
func listYAML(specs []spec) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: List\nitems:\n")
	for _, s := range specs {
		for j, line := range strings.Split(strings.TrimSuffix(s.yaml(), "\n"), "\n") {
			if j == 0 {
				b.WriteString("- ")
			} else {
				b.WriteString("  ")
			}
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// rejected returns a file whose content has a problem or a conflict, if
// any, so that batches fix such files as often as they make them.
func (w *twin) rejected() string {
	for _, name := range slices.Sorted(maps.Keys(w.fast.files)) {
		if f := w.fast.files[name]; len(f.allProblems()) > 0 {
			return name
		}
	}
	return ""
}

// step makes one random batch and reads it with both scanners.
func (w *twin) step(i int) {
	w.t.Helper()
	w.clock = w.clock.Add(time.Duration(w.rnd.IntN(300)) * time.Millisecond)
	name := w.pick(twinFiles)
	if bad := w.rejected(); bad != "" && w.rnd.IntN(3) == 0 {
		os.Remove(filepath.Join(w.dir, bad)) //nolint:errcheck // there
		delete(w.files, bad)
		w.both(fmt.Sprintf("batch %d: delete rejected %s", i, bad), func(sc *scanner) *snapshot { s, _ := sc.reread([]string{bad}); return s })
		return
	}
	var what string
	switch n := w.rnd.IntN(112); {
	case n >= 104:
		w.forgetAndAdd(i, name)
		return
	case n >= 97:
		w.move(i, name)
		return
	case n < 50:
		what = "edit or add " + name
		w.write(name, w.grow(w.files[name]))
		if w.rnd.IntN(3) == 0 { // a second file in the same batch
			other := w.pick(twinFiles)
			if w.rnd.IntN(3) == 0 && other != name { // the same new object in both
				w.write(other, append(slices.Clone(w.files[other]), w.files[name][len(w.files[name])-1]))
			} else {
				w.write(other, w.grow(w.files[other]))
			}
			what += " and " + other
			w.both(what, func(sc *scanner) *snapshot { s, _ := sc.reread([]string{name, other}); return s })
			return
		}
	case n < 62:
		what = "drop from " + name
		w.write(name, w.shrink(w.files[name]))
	case n < 66:
		what = "random content in " + name
		var specs []spec
		for range w.rnd.IntN(4) {
			specs = append(specs, w.randomObject())
		}
		w.write(name, specs)
	case n < 72:
		what = "delete " + name
		os.Remove(filepath.Join(w.dir, name)) //nolint:errcheck // may not exist
		delete(w.files, name)
	case n < 76:
		what = "break " + name
		writeFresh(w.t, w.dir, name, w.pick([]string{"", "kind: [\n", "apiVersion: v1\nkind: Pod\nmetadata: {name: p1}\nspec: {containrs: []}\n"}))
		w.files[name] = nil
	case n < 83:
		to := w.pick(twinFiles)
		what = "rename " + name + " to " + to
		if _, ok := w.files[name]; !ok || to == name {
			break
		}
		if err := os.Rename(filepath.Join(w.dir, name), filepath.Join(w.dir, to)); err != nil {
			w.t.Fatal(err)
		}
		w.files[to] = w.files[name]
		delete(w.files, name)
		w.both(what, func(sc *scanner) *snapshot { s, _, _ := sc.readRenamed([]string{to}, []string{name}); return s })
		return
	case n < 95:
		what = "settle"
		w.clock = w.clock.Add(settleDelay + time.Millisecond)
		a, _, _ := w.fast.readRenamed(w.fast.held, nil)
		b, _, _ := w.full.readRenamed(w.full.held, nil)
		w.same(what, a, b)
		return
	case n < 97:
		what = "full scan"
		w.both(what, (*scanner).scan)
		return
	case n < 100:
		what = "nothing new in " + name
	}
	w.both(fmt.Sprintf("batch %d: %s", i, what), func(sc *scanner) *snapshot { s, _ := sc.reread([]string{name}); return s })
}

// move makes one batch of two files where one drops an object (file name,
// or deleted with it when it was its only object) and the other adds it,
// as it was or edited.
func (w *twin) move(i int, name string) {
	w.t.Helper()
	from := w.files[name]
	to := w.pick(twinFiles)
	if len(from) == 0 || to == name {
		w.both(fmt.Sprintf("batch %d: nothing to move from %s", i, name), func(sc *scanner) *snapshot { s, _ := sc.reread([]string{name}); return s })
		return
	}
	j := w.rnd.IntN(len(from))
	moved := from[j].clone()
	what := fmt.Sprintf("batch %d: move %s from %s to %s", i, moved.name, name, to)
	if w.rnd.IntN(3) == 0 {
		moved = w.grow([]spec{moved})[0]
		what += " edited"
	}
	if len(from) == 1 {
		os.Remove(filepath.Join(w.dir, name)) //nolint:errcheck // there
		delete(w.files, name)
		what += ", " + name + " deleted"
	} else {
		w.write(name, slices.Delete(slices.Clone(from), j, j+1))
	}
	w.write(to, append(slices.Clone(w.files[to]), moved))
	batch := []string{name, to}
	if w.rnd.IntN(2) == 0 {
		batch = []string{to, name}
	}
	w.both(what, func(sc *scanner) *snapshot { s, _ := sc.reread(batch); return s })
}

// forgetAndAdd makes one batch in which file name is deleted and
// forgotten, then written again (as it was, or edited) and read.
func (w *twin) forgetAndAdd(i int, name string) {
	w.t.Helper()
	specs, ok := w.files[name]
	if !ok || w.fast.whole() || w.full.whole() {
		w.both(fmt.Sprintf("batch %d: nothing to forget in %s", i, name), func(sc *scanner) *snapshot { s, _ := sc.reread([]string{name}); return s })
		return
	}
	what := fmt.Sprintf("batch %d: %s forgotten and added again", i, name)
	os.Remove(filepath.Join(w.dir, name)) //nolint:errcheck // there
	for _, sc := range []*scanner{w.fast, w.full} {
		if !sc.forget(sc.update([]string{name})) {
			w.t.Fatalf("%s: the directory is gone", what)
		}
	}
	switch n := w.rnd.IntN(3); {
	case n == 0 && specs != nil:
		specs, what = w.grow(specs), what+" grown"
	case n == 1 && specs != nil:
		specs, what = w.shrink(specs), what+" shrunk"
	}
	if specs == nil {
		specs = []spec{w.freshObject()}
	}
	w.write(name, specs)
	w.both(what, func(sc *scanner) *snapshot { sc.update([]string{name}); return sc.result() })
}

// TestFastMergeIsTheFullMerge: random batches of edits, additions,
// deletions, moves between files (an object written to another file),
// drops of parts and of objects, broken and empty files, renames, full
// scans and settle rechecks, of ConfigMaps, Secrets and pods (some bound
// to another node, edited to and from it), in documents and in v1 Lists,
// with one-batch moves (one file drops an object, another adds it) and
// files forgotten and added again in one batch, read by a scanner with the
// fast path and by one that merges every file each time, give the same
// snapshot (objects, versions, pods, status with its problems), the same
// held files and recheck, the same objects in force, the same claims and
// the same state of each file after every batch. The fast path must have
// made a good share of the results, and each case must have been made, so
// that the test does not pass by never taking it.
func TestFastMergeIsTheFullMerge(t *testing.T) {
	const seeds, batches = 5, 250
	total := 0
	seen := map[string]int{}
	for seed := range uint64(seeds) {
		w := newTwin(t, seed)
		w.write("a.yaml", []spec{{name: "cm0", keys: map[string]string{"a": "v0"}}, {pod: true, name: "p0", image: "img0", vols: []string{"v0"}}})
		w.write("b.yaml", []spec{{pod: true, name: "p1", image: "img0"}})
		w.both("start", (*scanner).scan)
		for i := range batches {
			w.step(i)
		}
		if w.full.fastResults != 0 {
			t.Fatalf("seed %d: the scanner forced to the full merge took the fast path %d times", seed, w.full.fastResults)
		}
		total += w.fast.fastResults
		for c, n := range w.seen {
			seen[c] += n
		}
	}
	if total < seeds*batches/8 {
		t.Errorf("the fast path made %d results of %d batches: too few to compare", total, seeds*batches)
	}
	t.Logf("the fast path made %d results of %d batches", total, seeds*batches)
	for _, c := range []string{"move ", "forgotten and added again", "pod edited to or from another node",
		"fast: pod edited to or from another node", "pod of another node in force", "Secret in force",
		"List item in force", "List written", "fast: List written"} {
		if seen[c] == 0 {
			t.Errorf("no batch covered %q", c)
		}
	}
	t.Logf("covered: %v", seen)
}

// TestFastMergeTakesEditsAndAdditions: in a synced directory, a file
// added with new objects and an edit that drops nothing take the fast
// path; an edit that drops a volume, a new file defining an object another
// file holds, and a deletion take the full merge.
func TestFastMergeTakesEditsAndAdditions(t *testing.T) {
	w := newTwin(t, 1)
	w.write("a.yaml", []spec{{pod: true, name: "p0", image: "img0", vols: []string{"v0"}}})
	w.both("start", (*scanner).scan)
	w.clock = w.clock.Add(2 * settleDelay)
	w.both("settled", func(sc *scanner) *snapshot { s, _, _ := sc.readRenamed(sc.held, nil); return s })
	reread := func(name string) func(sc *scanner) *snapshot {
		return func(sc *scanner) *snapshot { s, _ := sc.reread([]string{name}); return s }
	}
	steps := []struct {
		what  string
		do    func()
		name  string
		taken bool
	}{
		{"new file, new pod", func() { w.write("b.yaml", []spec{{pod: true, name: "p1", image: "img0"}}) }, "b.yaml", true},
		{"edit adding a volume", func() {
			w.write("a.yaml", []spec{{pod: true, name: "p0", image: "img1", vols: []string{"v0", "v1"}}})
		}, "a.yaml", true},
		{"edit dropping a volume", func() {
			w.write("a.yaml", []spec{{pod: true, name: "p0", image: "img1", vols: []string{"v1"}}})
		}, "a.yaml", false},
		{"settled", func() { w.clock = w.clock.Add(2 * settleDelay) }, "a.yaml", false},
		{"new file with a pod b.yaml holds", func() { w.write("c.yaml", []spec{{pod: true, name: "p1", image: "img2"}}) }, "c.yaml", false},
		{"the duplicate deleted", func() { os.Remove(filepath.Join(w.dir, "c.yaml")) }, "c.yaml", false}, //nolint:errcheck // there
		{"a ConfigMap added", func() { w.write("c.yaml", []spec{{name: "cm0", keys: map[string]string{"a": "v1"}}}) }, "c.yaml", true},
		{"a new pod with the UID of another file's pod", func() {
			w.write("b.yaml", []spec{{pod: true, name: "p1", image: "img0", uid: "u1"}})
			w.both("p1 with uid u1", reread("b.yaml"))
			w.write("d.yaml", []spec{{pod: true, name: "p2", image: "img0", uid: "u1"}})
		}, "d.yaml", false},
		{"the new pod's UID fixed", func() { w.write("d.yaml", []spec{{pod: true, name: "p2", image: "img0", uid: "u2"}}) }, "d.yaml", false},
		{"an edit in a clean directory again", func() { w.write("d.yaml", []spec{{pod: true, name: "p2", image: "img1", uid: "u2"}}) }, "d.yaml", true},
	}
	for _, s := range steps {
		before := w.fast.fastResults
		s.do()
		w.both(s.what, reread(s.name))
		if taken := w.fast.fastResults > before; taken != s.taken {
			t.Errorf("%s: fast path taken %v, want %v", s.what, taken, s.taken)
		}
	}
	if pods := podNames(w.fast.last.pods); !slices.Equal(pods, []string{"default/p0", "default/p1", "default/p2"}) {
		t.Errorf("pods %v", pods)
	}

	// Two files of one batch that define the same new object: the full
	// merge decides which one wins.
	before := w.fast.fastResults
	w.write("e.yaml", []spec{{name: "cm9"}})
	w.write("f.yaml", []spec{{name: "cm9"}})
	var snap *snapshot
	w.both("the same new object in two files", func(sc *scanner) *snapshot {
		s, _ := sc.reread([]string{"e.yaml", "f.yaml"})
		if sc == w.fast {
			snap = s
		}
		return s
	})
	if w.fast.fastResults != before || len(snap.status.Errors) != 1 {
		t.Errorf("two new files defining cm9: fast path taken %v, errors %q", w.fast.fastResults != before, snap.status.Errors)
	}
}
