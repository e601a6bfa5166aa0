package manifest

import (
	"errors"
	"github.com/volume-agent/volume-agent/internal/volume"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// havePods returns a condition that holds when exactly these pods are served.
func (h *harness) havePods(names ...string) func() bool {
	return func() bool { return slices.Equal(podNames(h.src.Pods()), names) }
}

// image returns the image of the first container of the named pod, or "".
func (h *harness) image(name string) string {
	for _, p := range h.src.Pods() {
		if p.Name == name {
			return p.Spec.Containers[0].Image
		}
	}
	return ""
}

func TestCreateEditRenameDelete(t *testing.T) {
	h := start(t, t.TempDir())

	h.write("web.yaml", pod("web", "v1"))
	h.expect("create", h.havePods("default/web"))

	h.write("web.yaml", pod("web", "v2"))
	h.expect("edit in place", func() bool { return h.image("web") == "v2" })

	// An editor writes a temporary file and renames it over the original.
	writeFile(t, h.dir, ".web.yaml.swp", pod("web", "v3"))
	h.drain()
	if err := os.Rename(filepath.Join(h.dir, ".web.yaml.swp"), filepath.Join(h.dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	h.expect("rename over", func() bool { return h.image("web") == "v3" })

	h.drain()
	if err := os.Remove(filepath.Join(h.dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	h.expect("delete", h.havePods())
}

func TestNoNotificationWithoutChange(t *testing.T) {
	h := start(t, t.TempDir())
	h.write("web.yaml", pod("web", "v1"))
	h.expect("create", h.havePods("default/web"))

	// The same bytes written again, and a file that is no manifest. (Other
	// bytes for the same content give a new version: see
	// TestResourceVersionFollowsContent.)
	n := h.scans()
	h.write("web.yaml", pod("web", "v1"))
	h.write("notes.txt", "not a manifest")
	h.waitScan(n)
	select {
	case <-h.changes:
		t.Errorf("OnChange called although pods, objects and errors are the same")
	case <-time.After(100 * time.Millisecond):
	}
}

func TestSyntaxErrorKeepsLastGoodContent(t *testing.T) {
	h := start(t, t.TempDir())
	h.write("web.yaml", pod("web", "v1")+"---\n"+pod("api", "v1"))
	h.expect("create", h.havePods("default/api", "default/web"))

	h.write("web.yaml", pod("web", "v2")+"---\nmetadata: [unclosed\n")
	h.expect("error reported", func() bool { return len(h.src.Status().Errors) == 1 })
	st := h.src.Status()
	if want := "web.yaml:9: invalid YAML: did not find expected ',' or ']' (document 2)"; st.Errors[0] != want {
		t.Errorf("error %q, want %q", st.Errors[0], want)
	}
	if !st.Synced || h.image("web") != "v1" || !h.havePods("default/api", "default/web")() {
		t.Errorf("last good content not in force: status %+v, pods %v", st, podNames(h.src.Pods()))
	}

	// Rescans of the same broken content log nothing new.
	n := h.scans()
	h.write("other.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n")
	h.waitScan(n)
	if got := h.logs.FilterMessageSnippet("rejected").Len(); got != 1 {
		t.Errorf("rejection logged %d times, want once per content", got)
	}

	h.write("web.yaml", pod("web", "v3"))
	h.expect("fixed", func() bool { return len(h.src.Status().Errors) == 0 && h.image("web") == "v3" })
	// The fix edits web at once; it drops api too, which waits to settle.
	h.expect("api dropped once the file settles", h.havePods("default/web"))
}

func TestUnknownKindKeepsPod(t *testing.T) {
	h := start(t, t.TempDir())
	h.write("web.yaml", pod("web", "v1"))
	h.expect("create", h.havePods("default/web"))

	h.write("web.yaml", strings.Replace(pod("web", "v2"), "kind: Pod", "kind: Pood", 1))
	h.expect("error reported", func() bool { return len(h.src.Status().Errors) == 1 })
	if got := h.src.Status().Errors[0]; !strings.HasPrefix(got, `web.yaml:2: unsupported kind "Pood"`) {
		t.Errorf("error %q", got)
	}
	if h.image("web") != "v1" {
		t.Errorf("a typo in kind made the pod change or disappear: %v", podNames(h.src.Pods()))
	}
}

func TestDuplicateAcrossFiles(t *testing.T) {
	h := start(t, t.TempDir())
	h.write("a.yaml", pod("alpha", "from-a"))
	h.write("b.yaml", pod("beta", "from-b"))
	h.expect("create", h.havePods("default/alpha", "default/beta"))

	h.write("b.yaml", pod("alpha", "from-b")+"---\n"+pod("beta", "from-b-v2"))
	h.expect("duplicate reported", func() bool { return len(h.src.Status().Errors) == 1 })
	want := "b.yaml:1: duplicate Pod default/alpha: already defined at a.yaml:1 (document 1, Pod/alpha)"
	if got := h.src.Status().Errors[0]; got != want {
		t.Errorf("error %q\nwant  %q", got, want)
	}
	if h.image("alpha") != "from-a" || h.image("beta") != "from-b" {
		t.Errorf("b.yaml's last good content is not in force: alpha=%s beta=%s", h.image("alpha"), h.image("beta"))
	}
}

func TestEarlierFileCannotTakeOverARunningPod(t *testing.T) {
	h := start(t, t.TempDir())
	h.write("b.yaml", pod("web", "in-force"))
	h.expect("create", h.havePods("default/web"))

	// A draft copy that sorts first must not replace the pod in force.
	h.write("a-draft.yaml", pod("web", "draft"))
	h.expect("duplicate reported", func() bool { return len(h.src.Status().Errors) == 1 })
	if got := h.src.Status().Errors[0]; !strings.HasPrefix(got, "a-draft.yaml:1: duplicate Pod default/web: already defined at b.yaml:1") {
		t.Errorf("error %q, want a-draft.yaml rejected as a duplicate of b.yaml", got)
	}
	if h.image("web") != "in-force" {
		t.Fatalf("the pod in force was taken over: image %s", h.image("web"))
	}

	// Once b.yaml lets the pod go, the draft is accepted.
	if err := os.Remove(filepath.Join(h.dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	h.expect("draft accepted", func() bool { return h.image("web") == "draft" && len(h.src.Status().Errors) == 0 })
}

func TestNeverParsedFileKeepsUnsynced(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "bad.yaml", pod("broken", "v1")+"  - [unclosed\n")
	writeFile(t, dir, "web.yaml", pod("web", "v1"))
	writeFile(t, dir, "x-dup.yaml", pod("web", "v1"))
	h := start(t, dir)
	st := h.src.Status()
	if st.Synced || !strings.Contains(st.Reason, "bad.yaml, x-dup.yaml") || len(st.Errors) != 2 {
		t.Fatalf("status %+v, want unsynced naming bad.yaml and x-dup.yaml", st)
	}
	if !h.havePods("default/web")() {
		t.Errorf("pods %v", podNames(h.src.Pods()))
	}

	h.write("bad.yaml", pod("broken", "v1"))
	h.expect("bad.yaml fixed", func() bool { return !strings.Contains(h.src.Status().Reason, "bad.yaml") })
	if st := h.src.Status(); st.Synced || !strings.Contains(st.Reason, "x-dup.yaml") {
		t.Errorf("status %+v, want still waiting for x-dup.yaml", st)
	}

	h.drain()
	if err := os.Remove(filepath.Join(dir, "x-dup.yaml")); err != nil {
		t.Fatal(err)
	}
	h.expect("synced", func() bool { return h.src.Status().Synced })
	if st := h.src.Status(); st.Reason != "" || len(st.Errors) > 0 {
		t.Errorf("status %+v", st)
	}
}

// TestConfigMapMountSwap follows the atomic writer of a configMap volume
// mounted as the manifest directory: name.yaml -> ..data/name.yaml, and
// ..data -> ..<timestamp> replaced by rename(2).
func TestConfigMapMountSwap(t *testing.T) {
	dir := t.TempDir()
	payload := func(ts, image string) {
		if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, ts), "pods.yaml", pod("web", image))
	}
	payload("..2026_01_01_00_00_00.1", "v1")
	mustSymlink(t, "..2026_01_01_00_00_00.1", filepath.Join(dir, "..data"))
	mustSymlink(t, "..data/pods.yaml", filepath.Join(dir, "pods.yaml"))
	h := start(t, dir)
	if h.image("web") != "v1" {
		t.Fatalf("pods %v", podNames(h.src.Pods()))
	}

	payload("..2026_01_01_00_00_01.2", "v2")
	h.drain()
	mustSymlink(t, "..2026_01_01_00_00_01.2", filepath.Join(dir, "..data_tmp"))
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2026_01_01_00_00_00.1")); err != nil {
		t.Fatal(err)
	}
	h.expect("swap", func() bool { return h.image("web") == "v2" })
}

// TestResyncSeesChangesWithoutEvents edits a symlink's target outside the
// directory, which the directory's watch does not report: the resync must
// pick it up.
func TestResyncSeesChangesWithoutEvents(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	writeFile(t, outside, "web.yaml", pod("web", "v1"))
	mustSymlink(t, filepath.Join(outside, "web.yaml"), filepath.Join(dir, "web.yaml"))
	h := start(t, dir, func(c *Config) { c.Resync = 200 * time.Millisecond })

	h.drain()
	writeFile(t, outside, "web.yaml", pod("web", "v2"))
	h.expect("resync", func() bool { return h.image("web") == "v2" })
}

func TestDirectoryRemovedKeepsState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "manifests")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "web.yaml", pod("web", "v1"))
	h := start(t, dir, func(c *Config) { c.Resync = 200 * time.Millisecond })
	h.drain()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	h.expect("error reported", func() bool { return len(h.src.Status().Errors) == 1 })
	st := h.src.Status()
	if !strings.HasPrefix(st.Errors[0], "read manifest directory:") || !st.Synced || !h.havePods("default/web")() {
		t.Errorf("status %+v, pods %v", st, podNames(h.src.Pods()))
	}

	// A directory created anew is followed at once, and watched; web, not
	// in it, goes once it settles.
	h.drain()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "api.yaml", pod("api", "v1"))
	h.expect("directory back", h.havePods("default/api", "default/web"))
	h.expect("web gone once the new directory settles", h.havePods("default/api"))
	if st := h.src.Status(); len(st.Errors) > 0 || !st.Synced {
		t.Errorf("status %+v", st)
	}
}

func TestConfigMapVersionChangesWithContent(t *testing.T) {
	h := start(t, t.TempDir())
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {k: one}\n"
	h.write("c.yaml", cm)
	var first *v1.ConfigMap
	h.expect("create", func() bool {
		first, _ = h.src.Objects().ConfigMap("default", "c")
		return first != nil
	})
	h.write("c.yaml", strings.Replace(cm, "one", "two", 1))
	h.expect("edit", func() bool {
		second, _ := h.src.Objects().ConfigMap("default", "c")
		return second.ResourceVersion != first.ResourceVersion && second.Data["k"] == "two"
	})
	if first.Data["k"] != "one" {
		t.Errorf("an object handed out was modified: %v", first.Data)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func TestEmptiedFileKeepsItsPods(t *testing.T) {
	h := start(t, t.TempDir())
	h.write("web.yaml", pod("web", "v1"))
	h.expect("create", h.havePods("default/web"))

	h.write("web.yaml", "") // a shell redirect truncates before writing
	h.expect("emptied file reported", func() bool { return len(h.src.Status().Errors) == 1 })
	n := h.scans()
	h.write("web.yaml", "# the pod\n") // and writes its opening comment first
	h.waitScan(n)
	if got := h.src.Status().Errors[0]; !strings.Contains(got, "web.yaml: file has no objects") {
		t.Errorf("error %q, want one saying web.yaml is empty", got)
	}
	if !h.havePods("default/web")() {
		t.Fatalf("pods %v after the file was emptied, want web kept", podNames(h.src.Pods()))
	}

	h.write("web.yaml", pod("web", "v2"))
	h.expect("rewritten", func() bool { return len(h.src.Status().Errors) == 0 && h.image("web") == "v2" })

	if err := os.Remove(filepath.Join(h.dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	h.expect("deleted", h.havePods())
}

func TestHalfWrittenFileNeverDropsAPod(t *testing.T) {
	var mu sync.Mutex
	var seen [][]string // every pod list published
	h := start(t, t.TempDir(), func(c *Config) {
		next := c.OnChange
		c.OnChange = func() {
			next()
		}
	})
	record := func() {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, podNames(h.src.Pods()))
	}
	full := pod("web", "v1") + "---\n" + pod("db", "v1")
	h.write("pods.yaml", full)
	h.expect("create", h.havePods("default/db", "default/web"))

	// An in-place writer pauses 300 ms after the first pod: the truncated
	// file parses, with one pod fewer.
	f, err := os.OpenFile(filepath.Join(h.dir, "pods.yaml"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	half := len(pod("web", "v1") + "---\n")
	if _, err := f.WriteString(full[:half]); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		record()
	}
	if _, err := f.WriteString(full[half:]); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for end := time.Now().Add(settleDelay + 200*time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		record()
	}
	mu.Lock()
	defer mu.Unlock()
	for _, pods := range seen {
		if len(pods) != 2 {
			t.Fatalf("pods %v published while the file was half written; want db and web throughout", pods)
		}
	}
}

func TestDroppedPodTakesEffectOnceTheFileSettles(t *testing.T) {
	h := start(t, t.TempDir())
	h.write("pods.yaml", pod("web", "v1")+"---\n"+pod("db", "v1"))
	h.expect("create", h.havePods("default/db", "default/web"))
	start := time.Now()
	h.write("pods.yaml", pod("web", "v1"))
	h.expect("db dropped", h.havePods("default/web"))
	if d := time.Since(start); d < settleDelay {
		t.Errorf("db dropped after %v, before the file settled (%v)", d, settleDelay)
	}
}

func TestEmptyFileAtStartKeepsUnsynced(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "web.yaml", "") // a save cut off by a crash
	h := start(t, dir)
	if st := h.src.Status(); st.Synced || !strings.Contains(st.Reason, "web.yaml") {
		t.Fatalf("status %+v, want not synced, naming web.yaml", st)
	}
	h.write("web.yaml", pod("web", "v1"))
	h.expect("synced once it has content", func() bool { return h.src.Status().Synced })
}

const twoKeys = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata:\n  a: \"1\"\n  b: \"2\"\n"

// keys returns the keys of ConfigMap default/cfg, or nil.
func (h *harness) keys() []string {
	cm, err := h.src.Objects().ConfigMap("default", "cfg")
	if err != nil {
		return nil
	}
	return slices.Sorted(maps.Keys(cm.Data))
}

// A ConfigMap read half-written can lack keys: that waits for the file to
// settle, or a configMap volume would lose files. Added and changed keys
// take effect at once.
func TestDroppedKeyTakesEffectOnceTheFileSettles(t *testing.T) {
	h := start(t, t.TempDir())
	h.write("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata:\n  a: \"1\"\n")
	h.expect("create", func() bool { return slices.Equal(h.keys(), []string{"a"}) })
	start := time.Now()
	h.write("cm.yaml", twoKeys)
	h.expect("a key added", func() bool { return slices.Equal(h.keys(), []string{"a", "b"}) })
	if d := time.Since(start); d >= settleDelay {
		t.Errorf("an added key took %v: additions must not wait for the file to settle", d)
	}
	start = time.Now()
	h.write("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata:\n  a: \"1\"\n")
	h.expect("a key dropped", func() bool { return slices.Equal(h.keys(), []string{"a"}) })
	if d := time.Since(start); d < settleDelay {
		t.Errorf("key b dropped after %v, before the file settled (%v)", d, settleDelay)
	}
}

// A file written just before the agent started may be half written, and
// what it held before is unknown (the volumes on disk may hold more): its
// first content waits for it to settle, and until then its objects are not
// known yet. A file that has not changed for a while counts at once.
func TestFreshFileAtStartWaitsToSettle(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "old.yaml", pod("web", "v1"))
	writeFresh(t, dir, "cm.yaml", twoKeys)
	h := start(t, dir)
	if _, err := h.src.Objects().ConfigMap("default", "cfg"); !errors.Is(err, volume.ErrNotReady) {
		t.Fatalf("lookup in a fresh file at start = %v; want not known yet", err)
	}
	if !slices.Equal(podNames(h.src.Pods()), []string{"default/web"}) {
		t.Fatalf("pods = %v; want the pod of the settled file at once", podNames(h.src.Pods()))
	}
	h.expect("the fresh file taken once settled", func() bool { return slices.Equal(h.keys(), []string{"a", "b"}) })
	if !h.src.Status().Synced {
		t.Fatal("not synced once every file settled")
	}
}
