package asw

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/dsw"
)

func counted() (*World, *atomic.Int64) {
	var n atomic.Int64
	return New(func() { n.Add(1) }), &n
}

func mounted(uid, name, version string) Volume {
	return Volume{PodUID: types.UID(uid), Name: name, Plugin: "kubernetes.io/empty-dir", Dir: "/root/" + uid + "/" + name, Path: "/root/" + uid + "/" + name, State: Mounted, Version: version}
}

func found(uid, name string) Volume {
	v := mounted(uid, name, "")
	v.State, v.Reconstructed = Uncertain, true
	return v
}

func TestSetGetDelete(t *testing.T) {
	w, n := counted()
	v := mounted("p", "v", "1")
	w.Set(v)
	if n.Load() != 1 {
		t.Fatalf("first Set sent %d signals, want 1", n.Load())
	}
	if got, ok := w.Get(v.Key()); !ok || got != v {
		t.Fatalf("Get = %+v, %v; want %+v", got, ok, v)
	}
	w.Set(v)
	if n.Load() != 1 {
		t.Fatal("setting the same volume again signalled a change")
	}
	v2 := v
	v2.Version = "2"
	w.Set(v2)
	if n.Load() != 2 {
		t.Fatal("a new version did not signal a change")
	}
	w.Delete(v.Key())
	if _, ok := w.Get(v.Key()); ok {
		t.Fatal("volume still known after Delete")
	}
	if n.Load() != 3 {
		t.Fatal("Delete did not signal a change")
	}
	w.Delete(v.Key())
	if n.Load() != 3 {
		t.Fatal("deleting an unknown volume signalled a change")
	}
	if got := w.PodDirs(); !reflect.DeepEqual(got, []PodDir{{UID: "p"}}) {
		t.Fatalf("PodDirs after Delete = %+v; the pod directory must stay known", got)
	}
}

func TestKey(t *testing.T) {
	if got, want := mounted("p", "v", "1").Key(), (dsw.Key{PodUID: "p", Volume: "v"}); got != want {
		t.Fatalf("Key = %+v, want %+v", got, want)
	}
}

func TestVolumesSortedCopies(t *testing.T) {
	w := New(nil)
	for _, v := range []Volume{mounted("b", "a", "1"), mounted("a", "z", "1"), mounted("a", "b", "1")} {
		w.Set(v)
	}
	got := w.Volumes()
	var keys []string
	for _, v := range got {
		keys = append(keys, fmt.Sprintf("%s/%s", v.PodUID, v.Name))
	}
	if want := []string{"a/b", "a/z", "b/a"}; !reflect.DeepEqual(keys, want) {
		t.Fatalf("Volumes order = %v, want %v", keys, want)
	}
	got[0].State = Uncertain
	got[0].Version = "mutated"
	if v, _ := w.Get(dsw.Key{PodUID: "a", Volume: "b"}); v.State != Mounted || v.Version != "1" {
		t.Fatalf("world changed through a snapshot: %+v", v)
	}
	dirs := w.PodDirs()
	dirs[0].Reconstructed = true
	if w.PodDirs()[0].Reconstructed {
		t.Fatal("world changed through a PodDirs snapshot")
	}
}

func TestNotePodAndErrorsSignalChanges(t *testing.T) {
	w, n := counted()
	changes := w.Watch()
	changes.Take() // a new set says "all" until taken once
	steps := []struct {
		name    string
		do      func()
		signals int64
	}{
		{"NotePod of a new dir", func() { w.NotePod("p", "ns", "web", "manifests") }, 1},
		{"the same NotePod again", func() { w.NotePod("p", "ns", "web", "manifests") }, 1},
		{"SetPodDirError", func() { w.SetPodDirError("p", "boom") }, 2},
		{"the same SetPodDirError again", func() { w.SetPodDirError("p", "boom") }, 2},
		{"SetTearDownError of a volume not set up", func() { w.SetTearDownError(dsw.Key{PodUID: "p", Volume: "v"}, "boom") }, 2},
		{"Set", func() { w.Set(mounted("p", "v", "1")) }, 3},
		{"SetTearDownError", func() { w.SetTearDownError(dsw.Key{PodUID: "p", Volume: "v"}, "boom") }, 4},
		{"the same SetTearDownError again", func() { w.SetTearDownError(dsw.Key{PodUID: "p", Volume: "v"}, "boom") }, 4},
	}
	for _, s := range steps {
		s.do()
		if got := n.Load(); got != s.signals {
			t.Fatalf("after %s: %d signals, want %d", s.name, got, s.signals)
		}
	}
	if v, _ := w.Get(dsw.Key{PodUID: "p", Volume: "v"}); v.TearDownError != "boom" {
		t.Errorf("volume = %+v, want its teardown error recorded", v)
	}
	if got, _ := changes.Take(); !reflect.DeepEqual(got, []types.UID{"p"}) {
		t.Errorf("changed pods = %v, want [p]", got)
	}
}

func TestPodDirsWhere(t *testing.T) {
	w := New(nil)
	for _, uid := range []types.UID{"a", "b", "c"} {
		w.NotePod(uid, "ns", string(uid), "manifests")
	}
	got := w.PodDirsWhere(func(uid types.UID) bool { return uid != "b" })
	slices.SortFunc(got, func(x, y PodDir) int { return strings.Compare(string(x.UID), string(y.UID)) })
	if want := []PodDir{{UID: "a", Namespace: "ns", Name: "a", Source: "manifests"}, {UID: "c", Namespace: "ns", Name: "c", Source: "manifests"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("PodDirsWhere = %+v, want %+v", got, want)
	}
}

func TestPodDirs(t *testing.T) {
	tests := []struct {
		name string
		do   func(w *World)
		want []PodDir
	}{
		{"found at start", func(w *World) { w.AddPodDir("p", true) }, []PodDir{{UID: "p", Reconstructed: true}}},
		{"AddPodDir does not overwrite", func(w *World) {
			w.AddPodDir("p", false)
			w.AddPodDir("p", true)
		}, []PodDir{{UID: "p"}}},
		{"Set of a new volume records its pod dir", func(w *World) { w.Set(mounted("p", "v", "1")) }, []PodDir{{UID: "p"}}},
		{"reconstructed volume keeps the dir reconstructed", func(w *World) {
			w.AddPodDir("p", true)
			w.Set(found("p", "v"))
		}, []PodDir{{UID: "p", Reconstructed: true}}},
		{"a successful Set clears Reconstructed", func(w *World) {
			w.AddPodDir("p", true)
			w.Set(found("p", "v"))
			w.Set(mounted("p", "v", "1"))
		}, []PodDir{{UID: "p"}}},
		{"Set in one pod leaves the other pod's dir alone", func(w *World) {
			w.AddPodDir("p", true)
			w.AddPodDir("q", true)
			w.Set(mounted("p", "v", "1"))
		}, []PodDir{{UID: "p"}, {UID: "q", Reconstructed: true}}},
		{"a reconstructed volume does not mark a live dir reconstructed", func(w *World) {
			w.Set(mounted("p", "v", "1"))
			w.Set(found("p", "w"))
		}, []PodDir{{UID: "p"}}},
		{"RemovePodDir", func(w *World) {
			w.AddPodDir("p", true)
			w.AddPodDir("q", false)
			w.RemovePodDir("p")
		}, []PodDir{{UID: "q"}}},
		{"NotePod records a dir not known yet, with the pod's name", func(w *World) { w.NotePod("p", "ns", "web", "manifests") },
			[]PodDir{{UID: "p", Namespace: "ns", Name: "web", Source: "manifests"}}},
		{"NotePod names a dir found at start and leaves it reconstructed", func(w *World) {
			w.AddPodDir("p", true)
			w.NotePod("p", "ns", "web", "manifests")
		}, []PodDir{{UID: "p", Namespace: "ns", Name: "web", Source: "manifests", Reconstructed: true}}},
		{"a Set keeps the pod's name", func(w *World) {
			w.AddPodDir("p", true)
			w.NotePod("p", "ns", "web", "manifests")
			w.Set(mounted("p", "v", "1"))
		}, []PodDir{{UID: "p", Namespace: "ns", Name: "web", Source: "manifests"}}},
		{"SetPodDirError on a known dir", func(w *World) {
			w.NotePod("p", "ns", "web", "manifests")
			w.SetPodDirError("p", "rmdir: EIO")
			w.SetPodDirError("q", "rmdir: EIO")
		}, []PodDir{{UID: "p", Namespace: "ns", Name: "web", Source: "manifests", Error: "rmdir: EIO"}}},
		{"NotePod forgets the error of an earlier removal", func(w *World) {
			w.NotePod("p", "ns", "web", "manifests")
			w.SetPodDirError("p", "rmdir: EIO")
			w.NotePod("p", "ns", "web", "manifests")
		}, []PodDir{{UID: "p", Namespace: "ns", Name: "web", Source: "manifests"}}},
		{"sorted by UID", func(w *World) {
			w.AddPodDir("c", false)
			w.AddPodDir("a", false)
			w.AddPodDir("b", false)
		}, []PodDir{{UID: "a"}, {UID: "b"}, {UID: "c"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := New(nil)
			tt.do(w)
			if got := w.PodDirs(); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("PodDirs = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestPodDirSignals(t *testing.T) {
	w, n := counted()
	w.AddPodDir("p", true)
	w.AddPodDir("p", true)
	if n.Load() != 1 {
		t.Fatalf("AddPodDir twice sent %d signals, want 1", n.Load())
	}
	w.RemovePodDir("p")
	w.RemovePodDir("p")
	if n.Load() != 2 {
		t.Fatalf("RemovePodDir twice sent %d signals in all, want 2", n.Load())
	}
}

func TestConcurrentUse(t *testing.T) {
	var signals atomic.Int64
	w := New(func() { signals.Add(1) })
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uid := fmt.Sprint("pod", g%4)
			for i := range 200 {
				v := mounted(uid, fmt.Sprint("v", i%5), fmt.Sprint(i))
				w.Set(v)
				_, _ = w.Get(v.Key())
				_ = w.Volumes()
				_ = w.PodDirs()
				if i%3 == 0 {
					w.Delete(v.Key())
				}
				if i%50 == 0 {
					w.AddPodDir(types.UID(uid), true)
					w.RemovePodDir(types.UID(uid))
				}
			}
		}()
	}
	wg.Wait()
	if signals.Load() == 0 || len(w.Volumes()) == 0 {
		t.Fatal("concurrent use lost updates")
	}
}

func TestWatchNamesChangedPods(t *testing.T) {
	w := New(nil)
	c := w.Watch()
	if _, all := c.Take(); !all {
		t.Fatal("first Take does not say all")
	}
	steps := []struct {
		name   string
		change func()
		want   []types.UID
	}{
		{"volume set", func() { w.Set(mounted("a", "v", "1")) }, []types.UID{"a"}},
		{"same volume again", func() { w.Set(mounted("a", "v", "1")) }, nil},
		{"version written", func() { w.Set(mounted("a", "v", "2")) }, []types.UID{"a"}},
		{"volume deleted", func() { w.Delete(dsw.Key{PodUID: "a", Volume: "v"}) }, []types.UID{"a"}},
		{"unknown volume deleted", func() { w.Delete(dsw.Key{PodUID: "a", Volume: "v"}) }, nil},
		{"pod directory found", func() { w.AddPodDir("b", true) }, []types.UID{"b"}},
		{"found directory set up in", func() { w.Set(mounted("b", "v", "1")) }, []types.UID{"b"}},
		{"pod directory removed", func() { w.RemovePodDir("a") }, []types.UID{"a"}},
	}
	for _, step := range steps {
		step.change()
		if got, all := c.Take(); all || !reflect.DeepEqual(got, step.want) {
			t.Errorf("%s: Take = %v, %v; want %v", step.name, got, all, step.want)
		}
	}
}

func TestFoundDirectoryOwnedByASetUpCountsAsAChange(t *testing.T) {
	w := New(nil)
	w.Set(found("p", "v"))
	c := w.Watch()
	c.Take()
	// The volume is the same; its directory is no longer one found at start.
	w.Set(found("p", "w"))
	c.Take()
	v := mounted("p", "w", "")
	v.State = Uncertain
	w.Set(v)
	if got, _ := c.Take(); !reflect.DeepEqual(got, []types.UID{"p"}) {
		t.Fatalf("Take = %v, want [p]", got)
	}
	if d, _ := w.PodDir("p"); d.Reconstructed {
		t.Fatal("the pod directory is still marked found at start")
	}
}

func TestGenerationFollowsTheSetOfVolumes(t *testing.T) {
	w := New(nil)
	if g := w.Generation("p"); g != 0 {
		t.Fatalf("Generation of a pod without volumes = %d, want 0", g)
	}
	steps := []struct {
		name    string
		change  func()
		changed bool
	}{
		{"volume added", func() { w.Set(mounted("p", "v", "1")) }, true},
		{"version written", func() { w.Set(mounted("p", "v", "2")) }, false},
		{"state changed", func() {
			v := mounted("p", "v", "2")
			v.State = Uncertain
			w.Set(v)
		}, false},
		{"another plugin", func() {
			v := mounted("p", "v", "2")
			v.Plugin = "kubernetes.io/configmap"
			w.Set(v)
		}, true},
		{"found read-only", func() {
			v := mounted("p", "v", "2")
			v.Plugin, v.Access = "kubernetes.io/configmap", ReadOnly
			w.Set(v)
		}, true},
		{"second volume", func() { w.Set(mounted("p", "w", "1")) }, true},
		{"other pod", func() { w.Set(mounted("q", "v", "1")) }, false},
		{"volume removed", func() { w.Delete(dsw.Key{PodUID: "p", Volume: "w"}) }, true},
	}
	for _, step := range steps {
		before := w.Generation("p")
		step.change()
		if changed := w.Generation("p") != before; changed != step.changed {
			t.Errorf("%s: Generation changed: %v, want %v", step.name, changed, step.changed)
		}
	}
	vols, gen := w.PodVolumes("p")
	if len(vols) != 1 || vols[0].Name != "v" || gen != w.Generation("p") {
		t.Fatalf("PodVolumes = %+v, %d", vols, gen)
	}
}

func TestReadOnlyChanged(t *testing.T) {
	for _, tc := range []struct {
		access   Access
		readOnly bool
		want     bool
	}{
		{AccessUnknown, false, false},
		{AccessUnknown, true, false},
		{ReadWrite, false, false},
		{ReadWrite, true, true},
		{ReadOnly, true, false},
		{ReadOnly, false, true},
	} {
		if got := (Volume{Access: tc.access}).ReadOnlyChanged(tc.readOnly); got != tc.want {
			t.Errorf("a volume of access %d, spec readOnly %v: ReadOnlyChanged = %v, want %v", tc.access, tc.readOnly, got, tc.want)
		}
	}
	if AccessOf(true) != ReadOnly || AccessOf(false) != ReadWrite {
		t.Error("AccessOf does not tell read-only from read-write")
	}
}

func TestHasVolume(t *testing.T) {
	w := New(nil)
	if w.HasVolume("pv-a") {
		t.Fatal("an empty world has pv-a")
	}
	w.Set(Volume{PodUID: "p1", Name: "pv-a", Plugin: "kubernetes.io/local-volume", State: Uncertain})
	w.Set(Volume{PodUID: "p2", Name: "pv-a", Plugin: "kubernetes.io/local-volume", State: Mounted})
	w.Delete(dsw.Key{PodUID: "p1", Volume: "pv-a"})
	if !w.HasVolume("pv-a") || w.HasVolume("pv-b") {
		t.Errorf("HasVolume: want pv-a (pod p2) and not pv-b")
	}
	w.Delete(dsw.Key{PodUID: "p2", Volume: "pv-a"})
	if w.HasVolume("pv-a") {
		t.Error("pv-a torn down everywhere, still reported")
	}
}

// TestAppendPodVolumesIsPodVolumes: AppendPodVolumes appends what
// PodVolumes returns after what dst held; an unknown pod appends nothing.
func TestAppendPodVolumesIsPodVolumes(t *testing.T) {
	w := New(nil)
	w.Set(Volume{PodUID: "u1", Name: "b", State: Mounted})
	w.Set(Volume{PodUID: "u1", Name: "a", State: Uncertain})
	kept := Volume{Name: "kept"}
	want, _ := w.PodVolumes("u1")
	if got := w.AppendPodVolumes([]Volume{kept}, "u1"); !reflect.DeepEqual(got, append([]Volume{kept}, want...)) {
		t.Fatalf("AppendPodVolumes = %v; want kept, then %v", got, want)
	}
	if got := w.AppendPodVolumes([]Volume{kept}, "unknown"); len(got) != 1 {
		t.Fatalf("AppendPodVolumes of an unknown pod = %v; want dst alone", got)
	}
}
