package dsw

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// counted returns a world and the number of change signals it has sent.
func counted() (*World, *atomic.Int64) {
	var n atomic.Int64
	return New(func() { n.Add(1) }), &n
}

func vol(name, version string) Volume {
	return Volume{Name: name, Plugin: "kubernetes.io/configmap", Spec: &volume.Spec{}, Version: version}
}

func testPod(uid string, vols ...Volume) Pod {
	return Pod{UID: types.UID(uid), Namespace: "ns", Name: "pod-" + uid, Source: "manifests", Volumes: vols}
}

func names(p Pod) []string {
	var out []string
	for _, v := range p.Volumes {
		out = append(out, v.Name)
	}
	return out
}

func TestSetPodSignalsOnlyRealChanges(t *testing.T) {
	tests := []struct {
		name    string
		second  Pod
		changed bool
	}{
		{"identical", testPod("a", vol("v", "1")), false},
		{"new version", testPod("a", vol("v", "2")), true},
		{"new volume", testPod("a", vol("v", "1"), vol("w", "1")), true},
		{"volume removed", testPod("a"), true},
		{"new plugin", testPod("a", Volume{Name: "v", Plugin: "other", Version: "1"}), true},
		{"problem set", testPod("a", Volume{Name: "v", Plugin: "kubernetes.io/configmap", Version: "1", Problem: "bad"}), true},
		{"unsupported set", testPod("a", Volume{Name: "v", Plugin: "kubernetes.io/configmap", Version: "1", Unsupported: true}), true},
		{"conflict set", testPod("a", Volume{Name: "v", Plugin: "kubernetes.io/configmap", Version: "1", Conflict: true}), true},
		{"read-only set", testPod("a", Volume{Name: "v", Plugin: "kubernetes.io/configmap", Version: "1", ReadOnly: true}), true},
		{"renamed", Pod{UID: "a", Namespace: "ns", Name: "other", Source: "manifests", Volumes: []Volume{vol("v", "1")}}, true},
		{"moved namespace", Pod{UID: "a", Namespace: "other", Name: "pod-a", Source: "manifests", Volumes: []Volume{vol("v", "1")}}, true},
		{"other source", Pod{UID: "a", Namespace: "ns", Name: "pod-a", Source: "api", Volumes: []Volume{vol("v", "1")}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, n := counted()
			w.SetPod(testPod("a", vol("v", "1")))
			if n.Load() != 1 {
				t.Fatalf("adding a pod sent %d signals, want 1", n.Load())
			}
			w.SetPod(tt.second)
			if got := n.Load() == 2; got != tt.changed {
				t.Fatalf("second SetPod signalled a change: %v, want %v", got, tt.changed)
			}
			got, _ := w.Pod("a")
			if !reflect.DeepEqual(got, tt.second) {
				t.Fatalf("stored pod = %+v, want %+v", got, tt.second)
			}
		})
	}
}

func TestSetPodStoresNewSpecsWithoutSignal(t *testing.T) {
	w, n := counted()
	w.SetPod(testPod("a", vol("v", "1")))
	fresh := vol("v", "1")
	w.SetPod(testPod("a", fresh))
	if n.Load() != 1 {
		t.Fatalf("new Spec pointers signalled a change (%d signals)", n.Load())
	}
	got, _ := w.Volume(Key{PodUID: "a", Volume: "v"})
	if got.Spec != fresh.Spec {
		t.Fatal("the new Spec was not stored")
	}
}

func TestSetPodSortsVolumes(t *testing.T) {
	w := New(nil)
	w.SetPod(testPod("a", vol("c", "1"), vol("a", "1"), vol("b", "1")))
	p, _ := w.Pod("a")
	if got := names(p); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Fatalf("volumes = %v, want sorted", got)
	}
}

func TestDeletePod(t *testing.T) {
	w, n := counted()
	w.DeletePod("missing")
	if n.Load() != 0 {
		t.Fatal("deleting an unknown pod signalled a change")
	}
	w.SetPod(testPod("a", vol("v", "1")))
	w.SetPod(testPod("b", vol("v", "1")))
	w.SetError(Key{PodUID: "a", Volume: "v"}, "boom")
	w.SetError(Key{PodUID: "b", Volume: "v"}, "bang")
	before := n.Load()
	w.DeletePod("a")
	if n.Load() != before+1 {
		t.Fatal("deleting a pod did not signal a change")
	}
	if _, ok := w.Pod("a"); ok {
		t.Fatal("pod a still desired")
	}
	if got := w.Error(Key{PodUID: "a", Volume: "v"}); got != "" {
		t.Fatalf("error of the deleted pod kept: %q", got)
	}
	if got := w.Error(Key{PodUID: "b", Volume: "v"}); got != "bang" {
		t.Fatalf("error of another pod = %q, want bang", got)
	}
	// A pod added again under the same UID starts without the old error.
	w.SetPod(testPod("a", vol("v", "1")))
	if got := w.Error(Key{PodUID: "a", Volume: "v"}); got != "" {
		t.Fatalf("re-added pod inherited error %q", got)
	}
}

func TestSetError(t *testing.T) {
	w, n := counted()
	k := Key{PodUID: "a", Volume: "v"}
	w.SetError(k, "boom")
	if w.Error(k) != "" || n.Load() != 0 {
		t.Fatal("an error was recorded for a volume that is not desired")
	}
	w.SetPod(testPod("a", vol("v", "1"), vol("w", "1")))
	n.Store(0)

	steps := []struct {
		msg     string
		want    string
		signals int64
	}{
		{"boom", "boom", 1},
		{"boom", "boom", 1}, // same message: no signal
		{"bang", "bang", 2},
		{"", "", 3},
		{"", "", 3}, // clearing nothing: no signal
	}
	for i, s := range steps {
		w.SetError(k, s.msg)
		if got := w.Error(k); got != s.want {
			t.Fatalf("step %d: Error = %q, want %q", i, got, s.want)
		}
		if n.Load() != s.signals {
			t.Fatalf("step %d: %d signals, want %d", i, n.Load(), s.signals)
		}
	}
}

func TestErrorsDroppedWithTheVolume(t *testing.T) {
	w := New(nil)
	w.SetPod(testPod("a", vol("v", "1"), vol("w", "1")))
	w.SetError(Key{PodUID: "a", Volume: "v"}, "boom")
	w.SetError(Key{PodUID: "a", Volume: "w"}, "bang")
	w.SetPod(testPod("a", vol("w", "2")))
	if got := w.Error(Key{PodUID: "a", Volume: "v"}); got != "" {
		t.Fatalf("error of a removed volume kept: %q", got)
	}
	if got := w.Error(Key{PodUID: "a", Volume: "w"}); got != "bang" {
		t.Fatalf("error of a kept volume = %q, want bang", got)
	}
	// The volume coming back does not bring its old error back.
	w.SetPod(testPod("a", vol("v", "1"), vol("w", "2")))
	if got := w.Error(Key{PodUID: "a", Volume: "v"}); got != "" {
		t.Fatalf("re-added volume has error %q", got)
	}
}

func TestPopulated(t *testing.T) {
	w, n := counted()
	if w.Populated() {
		t.Fatal("a new world is populated")
	}
	w.MarkPopulated()
	w.MarkPopulated()
	if !w.Populated() {
		t.Fatal("MarkPopulated did not stick")
	}
	if n.Load() != 1 {
		t.Fatalf("MarkPopulated twice sent %d signals, want 1", n.Load())
	}
}

func TestPodsSortedByNamespaceAndName(t *testing.T) {
	w := New(nil)
	for _, p := range []Pod{
		{UID: "1", Namespace: "b", Name: "a"},
		{UID: "2", Namespace: "a", Name: "z"},
		{UID: "3", Namespace: "a", Name: "b"},
		{UID: "5", Namespace: "a", Name: "b"}, // same name, other UID (a static pod recreated)
		{UID: "4", Namespace: "a", Name: "b"},
	} {
		w.SetPod(p)
	}
	var got []string
	for _, p := range w.Pods() {
		got = append(got, fmt.Sprintf("%s/%s/%s", p.Namespace, p.Name, p.UID))
	}
	want := []string{"a/b/3", "a/b/4", "a/b/5", "a/z/2", "b/a/1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Pods order = %v, want %v", got, want)
	}
	if uids := w.UIDs(); !reflect.DeepEqual(uids, []types.UID{"3", "4", "5", "2", "1"}) {
		t.Fatalf("UIDs = %v, want the order of Pods", uids)
	}
}

func TestSnapshotsAreCopies(t *testing.T) {
	w := New(nil)
	in := []Volume{vol("b", "1"), vol("a", "1")}
	w.SetPod(testPod("p", in...))
	in[0].Version = "caller changed it"

	pods := w.Pods()
	pods[0].Volumes[0].Version = "mutated"
	pods[0].Volumes = append(pods[0].Volumes[:0], vol("x", "9"))
	pods[0].Name = "mutated"

	p, _ := w.Pod("p")
	p.Volumes[0].Problem = "mutated"

	got, _ := w.Pod("p")
	want := testPod("p", vol("a", "1"), vol("b", "1"))
	want.Volumes[0].Spec, want.Volumes[1].Spec = got.Volumes[0].Spec, got.Volumes[1].Spec
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("world changed through a snapshot or the caller's slice: %+v", got)
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
			uid := types.UID(fmt.Sprint("pod", g%4))
			for i := range 200 {
				w.SetPod(Pod{UID: uid, Namespace: "ns", Name: string(uid), Volumes: []Volume{vol("v", fmt.Sprint(i%3)), vol("w", "1")}})
				w.SetError(Key{PodUID: uid, Volume: "v"}, fmt.Sprint("err", i%2))
				_ = w.Error(Key{PodUID: uid, Volume: "v"})
				for _, p := range w.Pods() {
					_ = len(p.Volumes)
				}
				_, _ = w.Volume(Key{PodUID: uid, Volume: "w"})
				if i%50 == 0 {
					w.DeletePod(uid)
					w.MarkPopulated()
				}
				_ = w.Populated()
			}
		}()
	}
	wg.Wait()
	if !w.Populated() || signals.Load() == 0 {
		t.Fatal("concurrent use lost updates")
	}
	for _, p := range w.Pods() {
		if got := names(p); !reflect.DeepEqual(got, []string{"v", "w"}) {
			t.Fatalf("pod %s has volumes %v", p.UID, got)
		}
	}
}

// TestAppendPodVolumesIsPodsVolumes: AppendPodVolumes appends what Pod
// returns, sorted by name, after what dst held, and copies: changing them
// changes nothing in the world; an unknown pod appends nothing.
func TestAppendPodVolumesIsPodsVolumes(t *testing.T) {
	w := New(nil)
	w.SetPod(Pod{UID: "u1", Volumes: []Volume{{Name: "b", Plugin: "p"}, {Name: "a", Plugin: "p"}}})
	kept := Volume{Name: "kept"}
	got, ok := w.AppendPodVolumes([]Volume{kept}, "u1")
	p, _ := w.Pod("u1")
	if !ok || !reflect.DeepEqual(got, append([]Volume{kept}, p.Volumes...)) || got[1].Name != "a" {
		t.Fatalf("AppendPodVolumes = %v, %v; want kept, then %v", got, ok, p.Volumes)
	}
	got[1].Plugin = "changed"
	if again, _ := w.AppendPodVolumes(nil, "u1"); again[0].Plugin != "p" {
		t.Fatal("changing the appended volumes changed the world")
	}
	if got, ok := w.AppendPodVolumes([]Volume{kept}, "unknown"); ok || len(got) != 1 {
		t.Fatalf("AppendPodVolumes of an unknown pod = %v, %v; want dst alone, false", got, ok)
	}
}
