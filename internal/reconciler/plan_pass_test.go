package reconciler

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
)

// passFixture is a reconciler over real worlds whose passes the test runs
// by hand; nothing is started.
type passFixture struct {
	desired *dsw.World
	actual  *asw.World
	r       *Reconciler
}

func newPassFixture() *passFixture {
	f := &passFixture{desired: dsw.New(nil), actual: asw.New(nil)}
	f.r = New(Config{Desired: f.desired, Actual: f.actual, Logger: zap.NewNop()})
	return f
}

func lookedAt(p passPlan) []string {
	if p.pods == nil {
		return []string{"all"}
	}
	out := []string{}
	for _, uid := range sortedUIDs(p.pods) {
		out = append(out, string(uid))
	}
	return out
}

// TestPassLooksAtChangedAndEndedPodsOnly: after the first (full) pass, a
// pass looks at the pods that changed and at those an operation of which
// ended since, not at those whose operations are still queued or running,
// and plans for them what a full pass would.
func TestPassLooksAtChangedAndEndedPodsOnly(t *testing.T) {
	f := newPassFixture()
	for _, uid := range []string{"a", "b", "c"} {
		f.desired.SetPod(pod(uid, want("v", cm, "1")))
		f.actual.Set(have(uid, "v", cm, "1", asw.Mounted, false))
	}
	f.desired.MarkPopulated()
	steps := []struct {
		name    string
		change  func()
		looked  []string
		actions []string
	}{
		{"first pass", func() {}, []string{"all"}, []string{}},
		{"nothing changed", func() {}, []string{}, []string{}},
		{"b's content moves on", func() { f.desired.SetPod(pod("b", want("v", cm, "2"))) }, []string{"b"}, []string{"refresh b/v"}},
		{"b's refresh still running, c deleted", func() { f.desired.DeletePod("c") }, []string{"c"}, []string{"teardown c/v"}},
		{"b's refresh failed", func() { f.r.opEnded("b/v") }, []string{"b"}, []string{"refresh b/v"}},
		{"b's backoff expired", func() { f.r.opEnded("b/v") }, []string{"b"}, []string{"refresh b/v"}},
		{"b refreshed", func() { f.actual.Set(have("b", "v", cm, "2", asw.Mounted, false)); f.r.opEnded("b/v") }, []string{"b"}, []string{}},
		{"c torn down", func() { f.actual.Delete(dsw.Key{PodUID: "c", Volume: "v"}); f.r.opEnded("c/v") }, []string{"c"}, []string{"cleanup c"}},
		{"c's directory removed", func() { f.actual.RemovePodDir("c"); f.r.opEnded("c/") }, []string{"c"}, []string{}},
		{"quiet again", func() {}, []string{}, []string{}},
	}
	for _, step := range steps {
		step.change()
		p := f.r.planPass(false)
		if got := lookedAt(p); !reflect.DeepEqual(got, step.looked) {
			t.Errorf("%s: looked at %v, want %v", step.name, got, step.looked)
		}
		if got := describe(p.actions); !reflect.DeepEqual(got, step.actions) {
			t.Errorf("%s: planned %v, want %v", step.name, got, step.actions)
		}
	}
	if p := f.r.planPass(true); p.pods != nil {
		t.Errorf("a full pass looked at %v only", lookedAt(p))
	}
}

// TestPassIsFullWhenThePopulatedStateFlips: a volume found on disk for a
// pod that is not desired waits for every source to sync; the pass after
// that looks at every pod, though no pod changed.
func TestPassIsFullWhenThePopulatedStateFlips(t *testing.T) {
	f := newPassFixture()
	f.actual.AddPodDir("gone", true)
	f.actual.Set(have("gone", "v", cm, "", asw.Uncertain, true))
	f.desired.MarkRemoved("gone")
	if p := f.r.planPass(false); len(p.actions) != 0 {
		t.Fatalf("before the sources synced: planned %v", describe(p.actions))
	}
	f.desired.MarkPopulated()
	p := f.r.planPass(false)
	if got := describe(p.actions); !reflect.DeepEqual(got, []string{"teardown gone/v"}) || p.pods != nil {
		t.Fatalf("after the sources synced: looked at %v, planned %v; want all, teardown gone/v", lookedAt(p), got)
	}
}

// TestIncrementalPassesPlanWhatAFullPassPlans changes both worlds at random
// and checks after every change that the pass plans exactly what a plan of
// the whole worlds plans, the operations of the last pass having ended.
func TestIncrementalPassesPlanWhatAFullPassPlans(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 1))
	f := newPassFixture()
	uids := []types.UID{"p0", "p1", "p2", "p3", "p4", "p5"}
	for step := range 3000 {
		changeAtRandom(rng, f, uids[rng.IntN(len(uids))])
		if rng.IntN(4) > 0 {
			changeAtRandom(rng, f, uids[rng.IntN(len(uids))])
		}
		p := f.r.planPass(false)
		got := describe(p.actions)
		want := describe(plan(f.r.fullSnapshot(f.desired.Populated())))
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d, step %d: the pass planned %v, a full plan %v", seed, step, got, want)
		}
		// Every planned operation ends before the next change, having
		// changed nothing (it failed, or found its plan stale): the worst
		// case for a pass that skips pods whose operations run.
		for _, a := range p.actions {
			f.r.opEnded(a.key())
		}
	}
}

// changeAtRandom makes one change to pod uid in one of the worlds, as the
// populator, an operation or reconstruction would.
func changeAtRandom(rng *rand.Rand, f *passFixture, uid types.UID) {
	name := []string{"a", "b"}[rng.IntN(2)]
	version := fmt.Sprint(rng.IntN(3))
	plugin := []string{cm, ed}[rng.IntN(2)]
	switch rng.IntN(9) {
	case 0, 1:
		vols := []dsw.Volume{want(name, plugin, version)}
		if rng.IntN(3) == 0 {
			vols = append(vols, dsw.Volume{Name: "c", Problem: "bad"})
		}
		f.desired.SetPod(pod(string(uid), vols...))
	case 2:
		f.desired.DeletePod(uid)
	case 3, 4:
		state := []asw.State{asw.Mounted, asw.Uncertain}[rng.IntN(2)]
		f.actual.Set(have(string(uid), name, plugin, version, state, rng.IntN(3) == 0))
	case 5:
		f.actual.Delete(dsw.Key{PodUID: uid, Volume: name})
	case 6:
		f.actual.AddPodDir(uid, rng.IntN(2) == 0)
	case 7:
		if vols, _ := f.actual.PodVolumes(uid); len(vols) == 0 {
			f.actual.RemovePodDir(uid)
		}
	case 8:
		if rng.IntN(50) == 0 {
			f.desired.MarkPopulated()
		}
		switch rng.IntN(6) {
		case 0:
			f.desired.MarkRemoved(uid)
		case 1:
			f.desired.Hold(uid, "held")
		case 2:
			f.desired.Forget(uid)
		}
		f.desired.SetError(dsw.Key{PodUID: uid, Volume: name}, []string{"", "failed"}[rng.IntN(2)])
	}
}
