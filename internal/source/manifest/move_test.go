package manifest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// rig drives a scanner by hand, on a clock of its own, the way Run's loop
// does: what is renamed into place is read at once, held-back files are
// looked at again when their time comes. Every snapshot is recorded.
type rig struct {
	t     *testing.T
	dir   string
	sc    *scanner
	clock time.Time
	snaps []*snapshot
}

// newRig scans dir, whose files were written long ago, as a start would.
func newRig(t *testing.T, files map[string]string) *rig {
	t.Helper()
	r := &rig{t: t, dir: t.TempDir(), clock: time.Now()}
	for name, content := range files {
		writeFile(t, r.dir, name, content)
	}
	r.sc = newScanner(r.dir, "node-1", zap.NewNop())
	r.sc.now = func() time.Time { return r.clock }
	r.record(r.sc.scan())
	return r
}

func (r *rig) record(snap *snapshot) { r.snaps = append(r.snaps, snap) }

// renameIn writes content under a temporary name and renames it to name,
// then reads it as the event of the rename makes Run do.
func (r *rig) renameIn(name, content string) {
	r.t.Helper()
	writeFresh(r.t, r.dir, ".tmp-"+name, content)
	r.mv(".tmp-"+name, name)
}

// mv renames from to to and reads both as Run does: a manifest renamed to
// another manifest name is a move, read in one step.
func (r *rig) mv(from, to string) {
	r.t.Helper()
	if err := os.Rename(filepath.Join(r.dir, from), filepath.Join(r.dir, to)); err != nil {
		r.t.Fatal(err)
	}
	var away []string
	if isManifestName(from) {
		away = []string{from}
	}
	snap, _, _ := r.sc.readRenamed([]string{to}, away)
	r.record(snap)
}

// settle lets the clock pass the settle delay and looks at the held-back
// files again, as the recheck timer does.
func (r *rig) settle() {
	r.clock = r.clock.Add(settleDelay + time.Millisecond)
	snap, _, _ := r.sc.readRenamed(r.sc.held, nil)
	r.record(snap)
}

// reread reads names once they are due, as the quiet timer makes Run do.
func (r *rig) reread(names []string) {
	r.t.Helper()
	snap, list := r.sc.reread(names)
	if list {
		r.t.Fatal("the directory is gone")
	}
	r.record(snap)
}

// last returns the current snapshot.
func (r *rig) last() *snapshot { return r.snaps[len(r.snaps)-1] }

// alwaysHad fails unless every snapshot since since served the pod name.
func (r *rig) alwaysHad(since int, name string) {
	r.t.Helper()
	for i, snap := range r.snaps[since:] {
		if !slices.Contains(podNames(snap.pods), name) {
			r.t.Errorf("snapshot %d serves %v: %s is gone for a while, and its volumes with it", since+i, podNames(snap.pods), name)
		}
	}
}

// A pod is its namespace and name, whichever file holds it: `mv a.yaml
// b.yaml` moves web from a to b in one step, though b's own pod goes.
func TestMoveOverAnotherFileKeepsThePod(t *testing.T) {
	r := newRig(t, map[string]string{"a.yaml": pod("web", "v1"), "b.yaml": pod("db", "v1")})
	n := len(r.snaps)
	r.mv("a.yaml", "b.yaml")
	r.alwaysHad(n, "default/web")
	r.alwaysHad(n, "default/db") // b's content dropped db: that waits to settle
	r.settle()
	if got := podNames(r.last().pods); !slices.Equal(got, []string{"default/web"}) {
		t.Errorf("pods %v once b.yaml settled, want only web", got)
	}
	r.alwaysHad(n, "default/web")
}

// A deploy renames two rewritten files into place, one after the other: db
// moves from z.yaml to a.yaml. Whichever file comes first, db is never gone,
// and no duplicate is left behind.
func TestTwoFileMoveInEitherOrder(t *testing.T) {
	a := pod("web", "v1")
	z := pod("db", "v1") + "---\n" + pod("cache", "v1")
	for _, order := range []string{"receiving file first", "giving file first"} {
		t.Run(order, func(t *testing.T) {
			r := newRig(t, map[string]string{"a.yaml": a, "z.yaml": z})
			n := len(r.snaps)
			writes := []func(){
				func() { r.renameIn("a.yaml", a+"---\n"+pod("db", "v1")) },
				func() { r.renameIn("z.yaml", pod("cache", "v1")) },
			}
			if order == "giving file first" {
				slices.Reverse(writes)
			}
			for _, write := range writes {
				write()
			}
			r.settle()
			r.alwaysHad(n, "default/db")
			if st := r.last().status; len(st.Errors) > 0 || !st.Synced {
				t.Errorf("status %+v once both files settled, want synced without errors", st)
			}
			if err := os.Remove(filepath.Join(r.dir, "z.yaml")); err != nil {
				t.Fatal(err)
			}
			r.reread([]string{"z.yaml"})
			if got := podNames(r.last().pods); !slices.Equal(got, []string{"default/db", "default/web"}) {
				t.Errorf("pods %v once z.yaml is deleted, want db and web: db belongs to a.yaml now", got)
			}
		})
	}
}

// A duplicate is rejected while the file in force still defines the object,
// and accepted as soon as that file lets it go, not at the next resync.
func TestDuplicateResolvedOnceTheOtherFileLetsGo(t *testing.T) {
	r := newRig(t, map[string]string{"b.yaml": pod("web", "in-force") + "---\n" + pod("db", "v1")})
	r.renameIn("a-draft.yaml", pod("web", "draft"))
	if st := r.last().status; len(st.Errors) != 1 || !strings.HasPrefix(st.Errors[0], "a-draft.yaml:1: duplicate Pod default/web") {
		t.Fatalf("status %+v, want a-draft.yaml rejected as a duplicate", st)
	}
	n := len(r.snaps)
	r.renameIn("b.yaml", pod("db", "v1"))
	r.settle()
	r.alwaysHad(n, "default/web")
	if st := r.last().status; len(st.Errors) > 0 {
		t.Errorf("status %+v once b.yaml let web go, want the duplicate resolved", st)
	}
	if img := imageOf(r.last(), "web"); img != "draft" {
		t.Errorf("web image %q, want the draft's, which holds web now", img)
	}
}

// A draft copy never takes a pod over while the pod's own file still
// defines it: a file read half-written without the pod is not believed
// before it settles, and a move waits for that too.
func TestDraftCannotTakeOverFromAHalfWrittenFile(t *testing.T) {
	full := pod("web", "in-force") + "---\n" + pod("db", "v1")
	r := newRig(t, map[string]string{"b.yaml": full})
	r.renameIn("a-draft.yaml", pod("web", "draft"))
	writeFresh(t, r.dir, "b.yaml", pod("db", "v1")) // half written
	r.reread([]string{"b.yaml"})
	r.clock = r.clock.Add(settleDelay / 2)
	writeFresh(t, r.dir, "b.yaml", full) // and complete
	r.reread([]string{"b.yaml"})
	r.settle()
	for i, snap := range r.snaps {
		if img := imageOf(snap, "web"); img != "in-force" {
			t.Errorf("snapshot %d: web image %q, want the pod in force kept", i, img)
		}
	}
	if st := r.last().status; len(st.Errors) != 1 || !strings.HasPrefix(st.Errors[0], "a-draft.yaml:1: duplicate Pod default/web") {
		t.Errorf("status %+v, want the draft still rejected", st)
	}
}

// Content that both adds and drops applies its additions and edits at
// once; only what it drops waits to settle.
func TestDropsWaitAdditionsDoNot(t *testing.T) {
	r := newRig(t, map[string]string{"pods.yaml": pod("web", "v1") + "---\n" + pod("db", "v1")})
	r.renameIn("pods.yaml", pod("web", "v2")+"---\n"+pod("api", "v1"))
	if got := podNames(r.last().pods); !slices.Equal(got, []string{"default/api", "default/db", "default/web"}) {
		t.Errorf("pods %v, want api added at once and db kept until the file settles", got)
	}
	if img := imageOf(r.last(), "web"); img != "v2" {
		t.Errorf("web image %q, want the edit applied at once", img)
	}
	r.settle()
	if got := podNames(r.last().pods); !slices.Equal(got, []string{"default/api", "default/web"}) {
		t.Errorf("pods %v once settled, want db dropped", got)
	}
}

// A pod that moves to a file that lacks one of its volumes is an edit that
// drops a volume: it waits for the receiving file to settle.
func TestMovedPodThatDropsAVolumeSettles(t *testing.T) {
	withVol := pod("web", "v1") + "  volumes:\n  - {name: data, emptyDir: {}}\n"
	r := newRig(t, map[string]string{"a.yaml": withVol, "b.yaml": pod("db", "v1")})
	if err := os.Remove(filepath.Join(r.dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	writeFresh(t, r.dir, "b.yaml", pod("db", "v1")+"---\n"+pod("web", "v2"))
	r.reread([]string{"a.yaml", "b.yaml"})
	if img := imageOf(r.last(), "web"); img != "v1" {
		t.Errorf("web image %q, want the version with its volume until b.yaml settles", img)
	}
	r.settle()
	if img := imageOf(r.last(), "web"); img != "v2" {
		t.Errorf("web image %q once b.yaml settled, want v2", img)
	}
}

// imageOf returns the image of the named pod in snap, or "".
func imageOf(snap *snapshot, name string) string {
	for _, p := range snap.pods {
		if p.Name == name {
			return p.Spec.Containers[0].Image
		}
	}
	return ""
}
