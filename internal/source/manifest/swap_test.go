package manifest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder keeps every pod list and status error the source published.
type recorder struct {
	mu     sync.Mutex
	seen   [][]string
	errors []string
}

// recording starts a source on dir, tweaked before it runs, that records
// every pod list it publishes.
func recording(t *testing.T, dir string, tweak ...func(*Source)) (*harness, *recorder) {
	t.Helper()
	rec := &recorder{}
	var h *harness
	h = newHarness(t, dir, func(c *Config) {
		next := c.OnChange
		c.OnChange = func() {
			rec.mu.Lock()
			rec.seen = append(rec.seen, podNames(h.src.Pods()))
			rec.errors = append(rec.errors, h.src.Status().Errors...)
			rec.mu.Unlock()
			next()
		}
	})
	for _, f := range tweak {
		f(h.src)
	}
	h.run()
	return h, rec
}

// alwaysHad fails unless every pod list published had the pod.
func (rec *recorder) alwaysHad(t *testing.T, name string) {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, pods := range rec.seen {
		if !slices.Contains(pods, name) {
			t.Errorf("pods %v published: %s was gone for a while", pods, name)
			return
		}
	}
}

// fill creates dir with a file per pod name.
func fill(t *testing.T, dir string, names ...string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		writeFile(t, dir, name+".yaml", pod(name, "v1"))
	}
}

// swapLink points link at target the way git-sync does: `ln -sfn target
// link.tmp && mv -T link.tmp link`.
func swapLink(t *testing.T, target, link string) {
	t.Helper()
	mustSymlink(t, target, link+".tmp")
	if err := os.Rename(link+".tmp", link); err != nil {
		t.Fatal(err)
	}
}

// `mv m m.old; mkdir m; cp … m/`: the new directory is followed at once,
// not at the resync; what it lacks goes once it settles, what it keeps is
// never gone.
func TestReplacedDirectoryIsFollowed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	fill(t, dir, "web", "db")
	h, rec := recording(t, dir)

	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	fill(t, dir)
	time.Sleep(100 * time.Millisecond) // the directory is empty for a while
	fill(t, dir, "web", "api")
	h.expect("the new directory read", func() bool { return slices.Contains(podNames(h.src.Pods()), "default/api") })
	h.expect("db, not in the new directory, gone once it settles", h.havePods("default/api", "default/web"))
	rec.alwaysHad(t, "default/web")

	h.write("web.yaml", pod("web", "v2"))
	h.expect("later changes in the new directory", func() bool { return h.image("web") == "v2" })
}

// A pod that moves to another file as the directory is replaced is handed
// over when the old file goes, with no duplicate on the way.
func TestReplacedDirectoryMovesAPodBetweenFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	fill(t, dir, "web")
	h, rec := recording(t, dir)

	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	fill(t, dir)
	writeFile(t, dir, "all.yaml", pod("web", "v2")+"---\n"+pod("api", "v1"))
	h.expect("the new directory read", h.havePods("default/api", "default/web"))
	h.expect("web handed over to all.yaml", func() bool { return h.image("web") == "v2" })
	rec.alwaysHad(t, "default/web")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range rec.errors {
		if strings.Contains(e, "duplicate") {
			t.Errorf("a duplicate published during the move: %s", e)
		}
	}
}

// A directory that is missing, then empty, for longer than the settle
// delay makes no pod look deleted: an empty listing after having had
// objects is not believed.
func TestReplacedDirectoryMissingOrEmptyKeepsPods(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	fill(t, dir, "web")
	h, rec := recording(t, dir)

	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * settleDelay)
	fill(t, dir)
	h.expect("empty directory reported", func() bool {
		st := h.src.Status()
		return len(st.Errors) == 1 && strings.Contains(st.Errors[0], "no objects yet")
	})
	time.Sleep(2 * settleDelay)
	if st := h.src.Status(); !st.Synced || !h.havePods("default/web")() {
		t.Fatalf("status %+v, pods %v: want web kept while the directory is empty", st, podNames(h.src.Pods()))
	}
	rec.alwaysHad(t, "default/web")
	fill(t, dir, "api")
	h.expect("web gone once the new directory settles", h.havePods("default/api"))
	if st := h.src.Status(); len(st.Errors) > 0 {
		t.Errorf("status %+v", st)
	}
}

// A git-sync style deploy swaps a symlink named by --manifests, or one on
// the way to it: every swap is followed at once.
func TestSymlinkSwapIsFollowed(t *testing.T) {
	for _, tc := range []struct{ name, sub string }{{"symlink named", ""}, {"symlink on the way", "deploy/manifests"}} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			current := filepath.Join(root, "current")
			fill(t, filepath.Join(root, "v1", tc.sub), "web")
			swapLink(t, "v1", current)
			h, rec := recording(t, filepath.Join(current, tc.sub))

			fill(t, filepath.Join(root, "v2", tc.sub), "web", "api")
			swapLink(t, "v2", current)
			h.expect("the swap to v2 followed", h.havePods("default/api", "default/web"))
			if err := os.RemoveAll(filepath.Join(root, "v1")); err != nil {
				t.Fatal(err)
			}

			fill(t, filepath.Join(root, "v3", tc.sub), "web", "db")
			swapLink(t, "v3", current)
			h.expect("the swap to v3 followed", func() bool { return slices.Contains(podNames(h.src.Pods()), "default/db") })
			h.expect("api, not in v3, gone once it settles", h.havePods("default/db", "default/web"))
			rec.alwaysHad(t, "default/web")
		})
	}
}
