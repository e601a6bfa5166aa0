package reconciler

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/subpath"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// fakeSubPaths records its calls in the plugin's call list, so that
// their order with the volume's set-up and teardown shows, and fails
// while fail is set.
type fakeSubPaths struct {
	plugin *fakePlugin
	mu     sync.Mutex
	fail   string // guarded by mu
}

func (f *fakeSubPaths) Prepare(_ context.Context, uid types.UID, volume, path string, wants []subpath.Want) (*subpath.Outcome, error) {
	f.plugin.set(func(p *fakePlugin) { p.calls = append(p.calls, "subpaths "+string(uid)+"/"+volume) })
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	o := &subpath.Outcome{}
	var err error
	for _, w := range wants {
		if w.Problem != "" {
			continue // as subpath.Preparer: refused by its spec
		}
		m := subpath.Prepared{Container: w.Container, Index: w.Index, SubPath: w.Path, Path: path + "/" + w.Path}
		if fail != "" {
			m.Path, m.Error, err = "", fail, subpath.ErrEscape
		}
		o.Mounts = append(o.Mounts, m)
	}
	return o, err
}

func (f *fakeSubPaths) RemovePod(_ context.Context, uid types.UID) error {
	f.plugin.set(func(p *fakePlugin) { p.calls = append(p.calls, "unsubpaths "+string(uid)) })
	return nil
}

func TestPlanSubPaths(t *testing.T) {
	w := []subpath.Want{{Container: "c", Index: 0, Path: "a"}}
	done := &subpath.Outcome{Mounts: []subpath.Prepared{{Container: "c", Index: 0, SubPath: "a", Path: "/t"}}}
	failed := &subpath.Outcome{Mounts: []subpath.Prepared{{Container: "c", Index: 0, SubPath: "a", Error: "x"}}}
	wanted := want("v", ed, "1")
	wanted.SubPaths = w
	mounted := func(o *subpath.Outcome) asw.Volume {
		a := have("p", "v", ed, "1", asw.Mounted, false)
		a.SubPaths = o
		return a
	}
	for name, tc := range map[string]struct {
		have asw.Volume
		want []string
	}{
		"prepared: nothing":                 {mounted(done), []string{}},
		"failed: set up again":              {mounted(failed), []string{"setup p/v"}},
		"none prepared yet: set up again":   {mounted(&subpath.Outcome{}), []string{"setup p/v"}},
		"no preparer (unprivileged): never": {mounted(nil), []string{}},
	} {
		s := snapshot{desired: []dsw.Pod{pod("p", wanted)}, actual: []asw.Volume{tc.have}, populated: true}
		if got := describe(plan(s)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: plan = %q, want %q", name, got, tc.want)
		}
	}
}

// TestSubPathsFollowTheirVolume: subPaths are prepared after their
// volume's set-up, a failure is the volume's error and is tried again,
// and the pod's subPath mounts go before its volumes are torn down.
func TestSubPathsFollowTheirVolume(t *testing.T) {
	var sp *fakeSubPaths
	h := newHarness(t, func(c *Config) {
		sp = &fakeSubPaths{plugin: c.Plugins.(registry)[testPlugin].(*fakePlugin), fail: "refused"}
		c.SubPaths = sp
	})
	h.start(t)
	v := desiredVolume("v", "1")
	v.SpecName = "data"
	v.SubPaths = []subpath.Want{{Container: "c", Index: 1, Path: "a/b"}}
	h.desired.SetPod(desiredPod("p", v))
	key := dsw.Key{PodUID: "p", Volume: "v"}
	waitFor(t, "the subPath error", func() bool { return strings.Contains(h.desired.Error(key), "refusing a symlink") })
	waitFor(t, "a second try", func() bool { return len(h.plugin.callsOf("subpaths")) >= 2 })
	sp.mu.Lock()
	sp.fail = ""
	sp.mu.Unlock()
	waitFor(t, "the subPath prepared", func() bool {
		a, _ := h.actualVolume("p", "v")
		return a.SubPaths != nil && subpath.Satisfied(v.SubPaths, a.SubPaths) && h.desired.Error(key) == ""
	})
	h.desired.DeletePod("p")
	waitFor(t, "the teardown", func() bool { return len(h.plugin.callsOf("teardown")) == 1 })
	calls := h.plugin.callsOf("unsubpaths")
	h.plugin.mu.Lock()
	all := slices.Clone(h.plugin.calls)
	h.plugin.mu.Unlock()
	if len(calls) == 0 || slices.Index(all, "unsubpaths p") > slices.Index(all, "teardown p/v") {
		t.Errorf("calls %q: want the subPaths removed before the teardown", all)
	}
	if all[0] != "setup p/v" || all[1] != "subpaths p/data" {
		t.Errorf("calls %q: want the set-up, then the subPaths of the volume by its name in the spec", all)
	}
}

// recorder records the events the reconciler reports.
type recorder struct {
	mu     sync.Mutex
	events []string // guarded by mu
}

func (r *recorder) SetUpSucceeded(*volume.Spec) { r.add("succeeded") }
func (r *recorder) SetUpFailed(_ *volume.Spec, err error) {
	r.add("failed: " + err.Error())
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// TestRefusedSubPathIsAFailedSetUp: a volume whose pod's spec asks for a
// refused subPath is set up, and its pod is told the set-up failed (a
// FailedMount event in cluster mode), not that it succeeded.
func TestRefusedSubPathIsAFailedSetUp(t *testing.T) {
	rec := &recorder{}
	h := newHarness(t, func(c *Config) {
		c.SubPaths = &fakeSubPaths{plugin: c.Plugins.(registry)[testPlugin].(*fakePlugin)}
		c.Recorder = rec
	})
	h.start(t)
	v := desiredVolume("v", "1")
	v.SubPaths = []subpath.Want{{Container: "c", Index: 0, Problem: `container "c", volumeMount 0 (volume "v"): subPath "/etc" must not be an absolute path`}}
	h.desired.SetPod(desiredPod("p", v))
	h.waitMounted(t, "p", "v", "1")
	waitFor(t, "the event", func() bool { return len(rec.all()) > 0 })
	if got := rec.all(); !reflect.DeepEqual(got, []string{"failed: " + v.SubPaths[0].Problem}) {
		t.Errorf("events %q, want the refusal", got)
	}
}

// TestSubPathWorkOnlyWhereThereMayBeSome: a new pod's volume that wants no
// subPath skips the preparation (it would find nothing); the volumes of a
// pod whose directory was on disk at start, new ones too, are prepared all
// the same (a crash may have left mounts no outcome records), and so is a
// volume that wants one.
func TestSubPathWorkOnlyWhereThereMayBeSome(t *testing.T) {
	var sp *fakeSubPaths
	h := newHarness(t, func(c *Config) {
		sp = &fakeSubPaths{plugin: c.Plugins.(registry)[testPlugin].(*fakePlugin)}
		c.SubPaths = sp
	})
	mkdirAll(t, h.volumeDir("found", "old"))
	wants := desiredVolume("wants", "1")
	wants.SubPaths = []subpath.Want{{Container: "c", Index: 0, Path: "a"}}
	h.desired.SetPod(desiredPod("new", desiredVolume("plain", "1"), wants))
	h.desired.SetPod(desiredPod("found", desiredVolume("old", "1"), desiredVolume("added", "1")))
	h.start(t)
	for _, v := range [][2]string{{"new", "plain"}, {"new", "wants"}, {"found", "old"}, {"found", "added"}} {
		got := h.waitMounted(t, v[0], v[1], "1")
		if got.SubPaths == nil {
			t.Errorf("%s/%s: no subPath outcome recorded; a later subPath could not be compared with it", v[0], v[1])
		}
	}
	got := h.plugin.callsOf("subpaths")
	slices.Sort(got)
	if want := []string{"subpaths found/added", "subpaths found/old", "subpaths new/wants"}; !slices.Equal(got, want) {
		t.Fatalf("subPath preparations %q, want %q (none for new/plain)", got, want)
	}
}

// TestSubPathsRemovedOnlyWhereTheyMayBe: a pod none of whose volumes asks
// for a subPath is torn down without RemovePod (its volume-subpaths
// directory was never made); a pod with one has them removed before its
// first volume's teardown.
func TestSubPathsRemovedOnlyWhereTheyMayBe(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.SubPaths = &fakeSubPaths{plugin: c.Plugins.(registry)[testPlugin].(*fakePlugin)}
	})
	h.start(t)
	with := desiredVolume("a", "1")
	with.SubPaths = []subpath.Want{{Container: "c", Index: 0, Path: "x"}}
	h.desired.SetPod(desiredPod("plain", desiredVolume("a", "1"), desiredVolume("b", "1")))
	h.desired.SetPod(desiredPod("sub", with, desiredVolume("b", "1")))
	for _, k := range []string{"plain/a", "plain/b", "sub/a", "sub/b"} {
		uid, v, _ := strings.Cut(k, "/")
		h.waitMounted(t, uid, v, "1")
	}
	h.desired.DeletePod("plain")
	h.desired.DeletePod("sub")
	waitFor(t, "both pod directories removed", func() bool {
		return len(h.podDirs()) == 0 && !exists(h.root.PodDir("plain")) && !exists(h.root.PodDir("sub"))
	})
	h.plugin.mu.Lock()
	all := slices.Clone(h.plugin.calls)
	h.plugin.mu.Unlock()
	if slices.Contains(all, "unsubpaths plain") {
		t.Errorf("calls %q: RemovePod for a pod without subPaths", all)
	}
	first := min(slices.Index(all, "teardown sub/a"), slices.Index(all, "teardown sub/b"))
	if i := slices.Index(all, "unsubpaths sub"); i < 0 || first < 0 || i > first {
		t.Errorf("calls %q: want the subPaths of pod sub removed before its first teardown", all)
	}
}

// TestSubPathsOfAPodFoundAtStartAreRemoved: a pod directory found at start
// may hold subPath mount points a crash left, of a volume its spec no
// longer has: they go with the pod even after a set-up of another of its
// volumes has made the directory the agent's own again (Reconstructed
// cleared), and with an orphan's teardown. A real Preparer removes them;
// the pod directory is gone after.
func TestSubPathsOfAPodFoundAtStartAreRemoved(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.SubPaths = subpath.Preparer{Root: c.Root, Mounter: &mount.Fake{}}
	})
	leftovers := map[string]string{}
	for _, uid := range []string{"wanted", "orphan"} {
		mkdirAll(t, h.volumeDir(uid, "v"))
		left := filepath.Join(h.root.SubPathsDir(types.UID(uid)), "gone", "c", "0")
		mkdirAll(t, left)
		leftovers[uid] = left
	}
	h.desired.SetPod(desiredPod("wanted", desiredVolume("v", "1")))
	h.desired.MarkPopulated()
	h.start(t)
	h.waitMounted(t, "wanted", "v", "1")
	if d, _ := h.actual.PodDir("wanted"); d.Reconstructed {
		t.Fatal("the set-up did not make the pod directory the agent's own")
	}
	if !exists(leftovers["wanted"]) {
		t.Fatal("the set-up of another volume removed the leftover (this test no longer tests the teardown)")
	}
	h.desired.DeletePod("wanted")
	h.desired.MarkRemoved("orphan")
	waitFor(t, "both pod directories forgotten", func() bool { return len(h.podDirs()) == 0 })
	for uid, left := range leftovers {
		if exists(left) || exists(h.root.PodDir(types.UID(uid))) {
			t.Errorf("%s: leftover subPath mount point or pod directory still there", uid)
		}
	}
}

// TestSubPathsMayExist: the actual state alone makes a pod's subPaths
// looked for — a pod directory or a volume found at start, an outcome with
// a mount — whatever subPathPods says; an outcome without one does not.
func TestSubPathsMayExist(t *testing.T) {
	withMount := &subpath.Outcome{Mounts: []subpath.Prepared{{Container: "c", SubPath: "x", Path: "/t"}}}
	for name, tc := range map[string]struct {
		fill func(w *asw.World)
		want bool
	}{
		"unknown pod": {func(*asw.World) {}, false},
		"no outcome":  {func(w *asw.World) { w.Set(have("p", "v", ed, "1", asw.Mounted, false)) }, false},
		"outcome without a mount": {func(w *asw.World) {
			v := have("p", "v", ed, "1", asw.Mounted, false)
			v.SubPaths = &subpath.Outcome{}
			w.Set(v)
		}, false},
		"outcome with a mount":     {func(w *asw.World) { v := have("p", "v", ed, "1", asw.Mounted, false); v.SubPaths = withMount; w.Set(v) }, true},
		"volume found at start":    {func(w *asw.World) { w.Set(have("p", "v", ed, "", asw.Uncertain, true)) }, true},
		"directory found at start": {func(w *asw.World) { w.AddPodDir("p", true) }, true},
	} {
		w := asw.New(nil)
		tc.fill(w)
		r := &Reconciler{cfg: Config{Actual: w}, subPathPods: &subPathPods{}}
		if got := r.subPathsMayExist("p"); got != tc.want {
			t.Errorf("%s: subPathsMayExist = %v, want %v", name, got, tc.want)
		}
	}
	r := &Reconciler{cfg: Config{Actual: asw.New(nil)}, subPathPods: &subPathPods{}}
	r.subPathPods.note("p")
	if !r.subPathsMayExist("p") {
		t.Error("a noted pod: subPathsMayExist = false")
	}
}
