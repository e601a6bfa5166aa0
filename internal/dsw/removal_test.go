package dsw

import "testing"

func TestRemoval(t *testing.T) {
	w := New(nil)
	watch := w.Watch()
	watch.Take() // "all" until first taken
	w.SetPod(Pod{UID: "p"})
	w.MarkRemoved("p")
	w.Hold("p", "why")
	if w.Removed("p") || !w.Undecided("p") {
		t.Fatal("a desired pod was marked removed or held")
	}
	w.DeletePod("p")
	if !w.Removed("p") {
		t.Fatal("a pod its source dropped is not removed")
	}
	w.Hold("p", "why")
	if _, held := w.Held("p"); held {
		t.Fatal("a removed pod was held")
	}
	w.SetPod(Pod{UID: "p"})
	if !w.Undecided("p") {
		t.Fatal("a pod back in its source keeps its removal")
	}
	w.Hold("q", "the directory lists nothing")
	if why, held := w.Held("q"); !held || why != "the directory lists nothing" || w.Removed("q") {
		t.Fatalf("held = %q, %v", why, held)
	}
	w.MarkRemoved("q")
	if _, held := w.Held("q"); held || !w.Removed("q") || !w.RemovedPods()["q"] {
		t.Fatal("a held pod marked removed is not removed")
	}
	w.Forget("q")
	if !w.Undecided("q") {
		t.Fatal("a forgotten pod is still removed")
	}
	if changed, _ := watch.Take(); len(changed) != 2 {
		t.Fatalf("changes = %v, want p and q", changed)
	}
}
