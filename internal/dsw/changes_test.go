package dsw

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// taken returns the pods a Take names, sorted, or "all".
func taken(c *Changes) []string {
	pods, all := c.Take()
	if all {
		return []string{"all"}
	}
	out := []string{}
	for _, uid := range pods {
		out = append(out, string(uid))
	}
	slices.Sort(out)
	return out
}

func TestWatchNamesChangedPods(t *testing.T) {
	w := New(nil)
	w.SetPod(testPod("before", vol("v", "1")))
	c := w.Watch()
	if got := taken(c); !reflect.DeepEqual(got, []string{"all"}) {
		t.Fatalf("first Take = %v, want all: the watcher has seen nothing yet", got)
	}
	steps := []struct {
		name   string
		change func()
		want   []string
	}{
		{"nothing", func() {}, []string{}},
		{"pod added", func() { w.SetPod(testPod("a", vol("v", "1"))) }, []string{"a"}},
		{"same pod again", func() { w.SetPod(testPod("a", vol("v", "1"))) }, []string{}},
		{"two pods changed", func() {
			w.SetPod(testPod("a", vol("v", "2")))
			w.SetPod(testPod("b", vol("v", "1")))
		}, []string{"a", "b"}},
		{"error recorded", func() { w.SetError(Key{PodUID: "b", Volume: "v"}, "failed") }, []string{"b"}},
		{"same error again", func() { w.SetError(Key{PodUID: "b", Volume: "v"}, "failed") }, []string{}},
		{"error of a volume not desired", func() { w.SetError(Key{PodUID: "b", Volume: "w"}, "failed") }, []string{}},
		{"pod deleted", func() { w.DeletePod("before") }, []string{"before"}},
		{"unknown pod deleted", func() { w.DeletePod("never") }, []string{}},
	}
	for _, step := range steps {
		step.change()
		if got := taken(c); !reflect.DeepEqual(got, step.want) {
			t.Errorf("%s: Take = %v, want %v", step.name, got, step.want)
		}
	}
}

func TestChangesOverflowToAll(t *testing.T) {
	w := New(nil)
	c := w.Watch()
	c.Take()
	for i := range maxChanges + 1 {
		w.SetPod(testPod(fmt.Sprint(i)))
	}
	if got := taken(c); !reflect.DeepEqual(got, []string{"all"}) {
		t.Fatalf("Take after %d changes = %d pods, want all", maxChanges+1, len(got))
	}
	w.SetPod(testPod("next"))
	if pods, all := c.Take(); all || !slices.Equal(pods, []types.UID{"next"}) {
		t.Fatalf("Take after the overflow was taken = %v, %v; want [next]", pods, all)
	}
}

func TestEveryWatcherSeesEveryChange(t *testing.T) {
	w := New(nil)
	a, b := w.Watch(), w.Watch()
	a.Take()
	b.Take()
	w.SetPod(testPod("p"))
	for i, c := range []*Changes{a, b} {
		if got := taken(c); !reflect.DeepEqual(got, []string{"p"}) {
			t.Errorf("watcher %d: Take = %v, want [p]", i, got)
		}
	}
}
