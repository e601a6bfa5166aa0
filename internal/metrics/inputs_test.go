package metrics

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/procpool"
	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// statusSource is a source that only reports a status.
type statusSource struct {
	name   string
	status source.Status
}

func (s *statusSource) Name() string              { return s.name }
func (s *statusSource) Run(context.Context) error { return nil }
func (s *statusSource) Pods() []*v1.Pod           { return nil }
func (s *statusSource) Objects() volume.Objects   { return nil }
func (s *statusSource) Node() *v1.Node            { return nil }
func (s *statusSource) Status() source.Status     { return s.status }

func TestSources(t *testing.T) {
	api := &statusSource{name: "api", status: source.Status{Reason: "node not found"}}
	manifests := &statusSource{name: "manifests", status: source.Status{Synced: true}}
	reg := prometheus.NewPedanticRegistry()
	New(reg, func() map[string]int { return nil }, Sources([]source.Source{api, manifests}))

	want := map[string]float64{
		"volume_agent_source_synced{source=api}":             0,
		"volume_agent_source_synced{source=manifests}":       1,
		"volume_agent_source_disconnected{source=api}":       0,
		"volume_agent_source_disconnected{source=manifests}": 0,
	}
	if got := gather(t, reg); !reflect.DeepEqual(got, want) {
		t.Fatalf("gathered %v\nwant %v", got, want)
	}

	// Read at every scrape: the API source syncs, then loses the server.
	api.status = source.Status{Synced: true, Disconnected: "API server unreachable"}
	want["volume_agent_source_synced{source=api}"] = 1
	want["volume_agent_source_disconnected{source=api}"] = 1
	if got := gather(t, reg); !reflect.DeepEqual(got, want) {
		t.Fatalf("gathered %v\nwant %v", got, want)
	}
}

// clock is a settable time for the Uncertain collector.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestUncertainAges(t *testing.T) {
	actual := asw.New(nil)
	clk := &clock{t: time.Unix(1000, 0)}
	c := newUncertainCollector(actual, clk.now)
	set := func(pod, name string, st asw.State) {
		actual.Set(asw.Volume{PodUID: types.UID(pod), Name: name, Plugin: "p", Dir: "/d/" + pod + "/" + name, State: st})
	}
	check := func(what string, wantN int, wantLongest time.Duration) {
		t.Helper()
		n, longest := c.observe()
		if n != wantN || longest != wantLongest {
			t.Fatalf("%s: %d Uncertain, longest %v; want %d, %v", what, n, longest, wantN, wantLongest)
		}
	}

	check("empty", 0, 0)
	set("a", "v", asw.Mounted)
	check("one mounted", 0, 0)
	set("a", "v", asw.Uncertain)
	check("first seen Uncertain", 1, 0)
	clk.t = clk.t.Add(time.Minute)
	set("b", "v", asw.Uncertain)
	check("a minute later, another", 2, time.Minute)
	clk.t = clk.t.Add(time.Minute)
	check("two minutes", 2, 2*time.Minute)

	// a recovers: b is now the oldest; a coming back starts again at 0.
	set("a", "v", asw.Mounted)
	clk.t = clk.t.Add(time.Minute)
	check("a mounted again", 1, 2*time.Minute)
	set("a", "v", asw.Uncertain)
	actual.Delete(asw.Volume{PodUID: types.UID("b"), Name: "v"}.Key())
	clk.t = clk.t.Add(time.Second)
	check("b torn down, a Uncertain again", 1, 0)
	clk.t = clk.t.Add(time.Second)
	check("a for a second", 1, time.Second)
}

func TestUncertainRegistered(t *testing.T) {
	actual := asw.New(nil)
	actual.Set(asw.Volume{PodUID: "a", Name: "v", Plugin: "p", Dir: "/d", State: asw.Uncertain})
	actual.Set(asw.Volume{PodUID: "a", Name: "w", Plugin: "p", Dir: "/e", State: asw.Mounted})
	reg := prometheus.NewPedanticRegistry()
	New(reg, func() map[string]int { return nil }, Uncertain(actual))
	got := gather(t, reg)
	if got["volume_agent_uncertain_volumes{}"] != 1 || len(got) != 2 {
		t.Fatalf("gathered %v; want 1 Uncertain volume and its longest age", got)
	}
	if _, ok := got["volume_agent_uncertain_longest_seconds{}"]; !ok {
		t.Fatalf("gathered %v; no volume_agent_uncertain_longest_seconds", got)
	}
}

// terminatingCount is a TerminatingCounter the test sets.
type terminatingCount struct{ n, stuck int }

func (c *terminatingCount) TerminatingPods() (int, int) { return c.n, c.stuck }

func TestTerminating(t *testing.T) {
	c := &terminatingCount{}
	reg := prometheus.NewPedanticRegistry()
	New(reg, func() map[string]int { return nil }, Terminating(c))
	want := map[string]float64{"volume_agent_terminating_pods{}": 0, "volume_agent_stuck_teardowns{}": 0}
	if got := gather(t, reg); !reflect.DeepEqual(got, want) {
		t.Fatalf("gathered %v\nwant %v", got, want)
	}
	// Read at every scrape.
	c.n, c.stuck = 3, 1
	want = map[string]float64{"volume_agent_terminating_pods{}": 3, "volume_agent_stuck_teardowns{}": 1}
	if got := gather(t, reg); !reflect.DeepEqual(got, want) {
		t.Fatalf("gathered %v\nwant %v", got, want)
	}
}

func TestHostPathCheckers(t *testing.T) {
	st := procpool.Stats{}
	reg := prometheus.NewPedanticRegistry()
	New(reg, func() map[string]int { return nil }, HostPathCheckers(func() procpool.Stats { return st }))
	want := map[string]float64{
		"volume_agent_host_path_checkers_abandoned_total{}": 0,
		"volume_agent_host_path_checkers_unreaped{}":        0,
		"volume_agent_host_path_checkers_unreaped_max{}":    0,
		"volume_agent_host_path_checkers_refused_total{}":   0,
	}
	if got := gather(t, reg); !reflect.DeepEqual(got, want) {
		t.Fatalf("gathered %v\nwant %v", got, want)
	}
	// Read at every scrape: a check hangs and its child is abandoned.
	st = procpool.Stats{Abandoned: 3, Unreaped: 1, Refused: 2, MaxStuck: 32}
	want["volume_agent_host_path_checkers_abandoned_total{}"] = 3
	want["volume_agent_host_path_checkers_unreaped{}"] = 1
	want["volume_agent_host_path_checkers_unreaped_max{}"] = 32
	want["volume_agent_host_path_checkers_refused_total{}"] = 2
	if got := gather(t, reg); !reflect.DeepEqual(got, want) {
		t.Fatalf("gathered %v\nwant %v", got, want)
	}
}
