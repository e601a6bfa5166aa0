package manifest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
)

// neverQuiet runs a source on dir whose quiet period never ends: only what
// is read at once, without waiting for the directory to be quiet, shows.
func neverQuiet(t *testing.T, dir string) *harness {
	t.Helper()
	h := newHarness(t, dir)
	h.src.debounce = debounce{delay: time.Hour, max: time.Hour}
	h.run()
	return h
}

// renameIn writes content under a temporary name in dir from, then renames
// it to name in the source's directory, as kubectl-style tools and `mv` do.
func (h *harness) renameIn(from, name, content string) {
	h.t.Helper()
	tmp := filepath.Join(from, ".tmp-"+name)
	writeFile(h.t, from, ".tmp-"+name, content)
	h.drain()
	if err := os.Rename(tmp, filepath.Join(h.dir, name)); err != nil {
		h.t.Fatal(err)
	}
}

func TestRenamedIntoPlaceIsReadAtOnce(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "web.yaml", pod("web", "v1"))
	h := neverQuiet(t, dir)

	h.renameIn(dir, "web.yaml", pod("web", "v2"))
	h.expect("renamed over from the same directory", func() bool { return h.image("web") == "v2" })
	h.renameIn(t.TempDir(), "web.yaml", pod("web", "v3"))
	h.expect("moved in from another directory", func() bool { return h.image("web") == "v3" })
	h.renameIn(dir, "api.yaml", pod("api", "v1"))
	h.expect("new file renamed in", h.havePods("default/api", "default/web"))

	// Files written in place wait for the quiet period, which never comes here.
	writeFresh(t, dir, "web.yaml", pod("web", "v4"))
	writeFresh(t, dir, "db.yaml", pod("db", "v1"))
	h.renameIn(dir, "api.yaml", pod("api", "v2"))
	h.expect("renamed in after in-place writes", func() bool { return h.image("api") == "v2" })
	if !h.havePods("default/api", "default/web")() || h.image("web") != "v3" {
		t.Errorf("pods %v, web %s: files written in place were read before the directory was quiet",
			podNames(h.src.Pods()), h.image("web"))
	}
}

// A name renamed away may be back a moment later (vim and emacs rename the
// file to a backup, then write it anew in place): it waits for the quiet
// period like a deletion, and reading it at once would remove its pods.
func TestNameGoneWaitsForTheQuietPeriod(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "web.yaml", pod("web", "v1"))
	writeFile(t, dir, "db.yaml", pod("db", "v1"))
	h := neverQuiet(t, dir)

	if err := os.Rename(filepath.Join(dir, "web.yaml"), filepath.Join(dir, "web.yaml~")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "db.yaml")); err != nil {
		t.Fatal(err)
	}
	// Events are handled in order: once this shows, the two above were seen.
	h.renameIn(dir, "api.yaml", pod("api", "v1"))
	h.expect("renamed in", func() bool { return h.image("api") == "v1" })
	if !h.havePods("default/api", "default/db", "default/web")() {
		t.Errorf("pods %v: a file renamed away or deleted was read before the directory was quiet", podNames(h.src.Pods()))
	}
}

// `mv a.yaml b.yaml` moves the objects in one step: never in both files (a
// duplicate, reported and logged) nor in none.
func TestMoveToAnotherManifestNameIsOneStep(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", pod("web", "v1"))
	h := neverQuiet(t, dir)

	n := h.scans()
	if err := os.Rename(filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	h.waitScan(n)
	if got := h.logs.FilterMessage("manifest file removed").Len(); got != 1 {
		t.Errorf("a.yaml removed %d times, want once, with the rename", got)
	}
	if got := h.logs.FilterMessageSnippet("rejected").Len(); got != 0 {
		t.Errorf("a file was rejected during the move: %v", h.logs.FilterMessageSnippet("rejected").All())
	}
	if st := h.src.Status(); !st.Synced || len(st.Errors) > 0 || !h.havePods("default/web")() {
		t.Errorf("status %+v, pods %v after the move", st, podNames(h.src.Pods()))
	}
}

// A file renamed into place is complete, but content that drops something
// still waits for it to settle (see settle.go): a file can also be renamed
// in while a writer still has it open, and a drop read too early deletes
// data.
func TestRenamedContentThatDropsStillSettles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "pods.yaml", pod("web", "v1")+"---\n"+pod("db", "v1"))
	h := neverQuiet(t, dir)

	start := time.Now()
	h.renameIn(dir, "pods.yaml", pod("web", "v1"))
	h.expect("db dropped once settled", h.havePods("default/web"))
	if d := time.Since(start); d < settleDelay {
		t.Errorf("db dropped after %v, before the file settled (%v)", d, settleDelay)
	}
}

func TestChanges(t *testing.T) {
	const (
		in    = 0x80 // IN_MOVED_TO
		out   = 0x40 // IN_MOVED_FROM
		write = 0x2  // IN_MODIFY
	)
	for _, tc := range []struct {
		name           string
		evs            []event
		links          bool
		in, away, late []string
		full           bool
	}{
		{name: "renamed in", evs: []event{{name: ".a.yaml.tmp", mask: out, cookie: 7}, {name: "a.yaml", mask: in, cookie: 7}}, in: []string{"a.yaml"}},
		{name: "written in place", evs: []event{{name: "a.yaml", mask: write}}, late: []string{"a.yaml"}},
		{name: "moved to another manifest name", evs: []event{{name: "a.yaml", mask: out, cookie: 9}, {name: "b.yaml", mask: in, cookie: 9}},
			in: []string{"b.yaml"}, away: []string{"a.yaml"}, late: []string{"a.yaml"}},
		{name: "moved away, then another renamed over it", evs: []event{{name: "a.yaml", mask: out, cookie: 9}, {name: "b.yaml", mask: in, cookie: 9},
			{name: "c.yaml", mask: out, cookie: 10}, {name: "a.yaml", mask: in, cookie: 10}},
			in: []string{"a.yaml", "b.yaml"}, away: []string{"c.yaml"}, late: []string{"a.yaml", "c.yaml"}},
		{name: "renamed to a backup", evs: []event{{name: "a.yaml", mask: out, cookie: 3}, {name: "a.yaml~", mask: in, cookie: 3}}, late: []string{"a.yaml"}},
		{name: "moved in after an unrelated move", evs: []event{{name: "a.yaml", mask: out, cookie: 3}, {name: "b.yaml", mask: in, cookie: 4}},
			in: []string{"b.yaml"}, late: []string{"a.yaml"}},
		{name: "other names without links", evs: []event{{name: ".a.yaml.swp", mask: write}, {name: "notes.txt", mask: in}}},
		{name: "other names with links", evs: []event{{name: "..data", mask: in}}, links: true, full: true},
		{name: "overflow", evs: []event{{mask: 0x4000}}, full: true},
		{name: "the directory itself", evs: []event{{mask: 0x400}}, full: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChanges()
			t0 := time.Now()
			for _, ev := range tc.evs {
				c.add(ev, tc.links, t0)
			}
			if in, away := c.takeNow(); !slices.Equal(in, tc.in) || !slices.Equal(away, tc.away) {
				t.Errorf("now %v and %v, want %v and %v", in, away, tc.in, tc.away)
			}
			if c.waiting() != (tc.full || len(tc.late) > 0) {
				t.Errorf("waiting %v, want %v", c.waiting(), !c.waiting())
			}
			if late, full := c.takeLater(t0.Add(time.Second), debounce{delay: debounceDelay, max: debounceMax}, false); !slices.Equal(late, tc.late) || full != tc.full {
				t.Errorf("later %v full %v, want %v %v", late, full, tc.late, tc.full)
			}
			if in, away := c.takeNow(); c.waiting() || len(in)+len(away) > 0 {
				t.Error("changes not forgotten once taken")
			}
		})
	}
}

// A file renamed into place can be gone again when it is read: renamed
// away to a backup by an editor that writes it anew next. That waits for
// the quiet period; the name renamed from in a move does not.
func TestRenamedFileGoneWhenReadWaits(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "web.yaml", pod("web", "v1"))
	writeFile(t, dir, "db.yaml", pod("db", "v1"))
	sc := newScanner(dir, "node-1", zap.NewNop())
	sc.scan()
	for _, name := range []string{"web.yaml", "db.yaml"} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	snap, gone, list := sc.readRenamed([]string{"web.yaml"}, []string{"db.yaml"})
	if list {
		t.Error("the directory, still there, to be listed")
	}
	if !slices.Equal(gone, []string{"web.yaml"}) {
		t.Errorf("names left to the quiet period %v, want web.yaml", gone)
	}
	if got := podNames(snap.pods); !slices.Equal(got, []string{"default/web"}) {
		t.Errorf("pods %v, want web kept and db, renamed from, gone", got)
	}
}

// A name renamed from that is gone with the directory is not forgotten, and
// the directory is not listed at once (the listing must wait for it to be
// quiet, see changes): the caller is told to list it.
func TestRenamedFromGoneWithTheDirectoryWaits(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	fill(t, dir, "web", "db")
	sc := newScanner(dir, "node-1", zap.NewNop())
	sc.scan()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	snap, gone, list := sc.readRenamed([]string{"api.yaml"}, []string{"db.yaml"})
	if !list || len(gone) != 1 {
		t.Errorf("list %v, gone %v: want the directory listed and api.yaml left to the quiet period", list, gone)
	}
	if got := podNames(snap.pods); !slices.Equal(got, []string{"default/db", "default/web"}) {
		t.Errorf("pods %v, want both kept", got)
	}
	if snap, list := sc.reread([]string{"web.yaml"}); !list || len(snap.pods) != 2 {
		t.Errorf("reread: list %v, pods %v: want the directory listed and both pods kept", list, podNames(snap.pods))
	}
}

// Events on names that are not manifests are ignored, unless a manifest
// may be read through them: a manifest that is a symlink (a mounted
// configMap's ..data, see TestConfigMapMountSwap) or has another name.
func TestManifestWrittenThroughAnotherNameIsRead(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, ".web.yaml.orig", pod("web", "v1"))
	if err := os.Link(filepath.Join(dir, ".web.yaml.orig"), filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	h := start(t, dir)
	h.write(".web.yaml.orig", pod("web", "v2"))
	h.expect("edit through the other name", func() bool { return h.image("web") == "v2" })
}

// The recheck of a held-back file comes when it is due, not when the
// directory is quiet: a file gone then is in a gap (vim's backup rename
// here, held open as the quiet period never ends) and waits for its quiet
// period; forgetting it would remove its pods.
func TestHeldFileGoneAtItsRecheckWaits(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "pods.yaml", pod("web", "v1")+"---\n"+pod("db", "v1"))
	h, rec := recording(t, dir, func(s *Source) { s.debounce = debounce{delay: time.Hour, max: time.Hour} })
	h.renameIn(dir, "pods.yaml", pod("web", "v2"))
	h.expect("the new content, db held back", func() bool { return h.image("web") == "v2" })
	if err := os.Rename(filepath.Join(dir, "pods.yaml"), filepath.Join(dir, "pods.yaml~")); err != nil {
		t.Fatal(err)
	}
	h.eventually("the recheck", func() bool {
		n := 0
		for _, e := range h.logs.FilterMessage("manifest directory scanned").All() {
			if files, ok := e.ContextMap()["files"].([]any); ok && slices.Contains(files, any("pods.yaml")) {
				n++
			}
		}
		return n >= 2
	})
	rec.alwaysHad(t, "default/web")
}
