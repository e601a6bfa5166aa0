package status

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/subpath"
)

// readyCase is one volume's inputs to readiness: what is desired, what is
// set up (nil: nothing), and the last operation's error.
type readyCase struct {
	desired dsw.Volume
	actual  *asw.Volume
	opErr   string
}

func (c readyCase) String() string {
	return fmt.Sprintf("desired %+v, actual %+v, opErr %q", c.desired, c.actual, c.opErr)
}

// readyCases is every combination of what compute reads of a volume named
// name: the desired volume's flags, plugin, waiting and subPaths; whether
// and how it is set up, with which plugin and subPath outcome; and an
// operation's error.
func readyCases(name string) []readyCase {
	wants := map[string][]subpath.Want{
		"none":    nil,
		"ok":      {{Container: "c", Index: 0, Path: "a"}},
		"refused": {{Container: "c", Index: 0, Problem: "absolute"}},
	}
	outcomes := map[string]*subpath.Outcome{
		"none":   nil,
		"ok":     {Mounts: []subpath.Prepared{{Container: "c", Index: 0, SubPath: "a", Path: "/p"}}},
		"failed": {Mounts: []subpath.Prepared{{Container: "c", Index: 0, SubPath: "a", Error: "no such file"}}},
		// the last match is what the status shows
		"failed, then ok": {Mounts: []subpath.Prepared{{Container: "c", Index: 0, SubPath: "a", Error: "x"}, {Container: "c", Index: 0, SubPath: "a", Path: "/p"}}},
		"other":           {Mounts: []subpath.Prepared{{Container: "d", Index: 1, SubPath: "b", Error: "x"}}},
	}
	var out []readyCase
	for _, kept := range []bool{false, true} {
		for _, conflict := range []bool{false, true} {
			for _, unsupported := range []bool{false, true} {
				for _, problem := range []string{"", "bad spec"} {
					for _, dPlugin := range []string{"", cm} {
						for _, waiting := range []string{"", "configMap ns/a"} {
							for _, want := range wants {
								d := dsw.Volume{Name: name, Plugin: dPlugin, Kept: kept, Conflict: conflict, Unsupported: unsupported, Problem: problem, Waiting: waiting, SubPaths: want}
								for _, a := range readyActuals(name, outcomes) {
									for _, opErr := range []string{"", "boom"} {
										out = append(out, readyCase{d, a, opErr})
									}
								}
							}
						}
					}
				}
			}
		}
	}
	return out
}

// readyActuals is nothing set up, and set up in each state, with each
// plugin and subPath outcome.
func readyActuals(name string, outcomes map[string]*subpath.Outcome) []*asw.Volume {
	out := []*asw.Volume{nil}
	for _, state := range []asw.State{asw.Mounted, asw.Uncertain} {
		for _, plugin := range []string{cm, ed} {
			for _, o := range outcomes {
				a := setUp("p", name, plugin, "1", state)
				a.SubPaths = o
				out = append(out, &a)
			}
		}
	}
	return out
}

// worldsOf is a pod "p" of cases, one volume each.
func worldsOf(cases ...readyCase) Worlds {
	w := Worlds{Desired: dsw.New(nil), Actual: asw.New(nil)}
	p := dsw.Pod{UID: "p", Namespace: "ns", Name: "web"}
	for _, c := range cases {
		p.Volumes = append(p.Volumes, c.desired)
	}
	w.Desired.SetPod(p)
	for _, c := range cases {
		if c.actual != nil {
			w.Actual.Set(*c.actual)
		}
		w.Desired.SetError(dsw.Key{PodUID: "p", Volume: c.desired.Name}, c.opErr)
	}
	return w
}

// TestReadyAgreesWithCompute: the fast check a waiting request makes at
// each change (Ready) decides as the full status does (Pod().Ready), for
// every combination of a volume's inputs, alone and beside another
// volume in each of a ready and a not-ready state: a runtime is never told
// "ready" by mistake, nor kept waiting when the pod is ready.
func TestReadyAgreesWithCompute(t *testing.T) {
	cases := readyCases("v")
	var ready, notReady int
	for _, c := range cases {
		w := worldsOf(c)
		p, ok := w.Pod("p")
		if !ok {
			t.Fatalf("pod not found: %s", c)
		}
		if got := w.Ready("p"); got != p.Ready {
			t.Fatalf("Ready = %v, compute says %v: %s", got, p.Ready, c)
		}
		if p.Ready {
			ready++
		} else {
			notReady++
		}
	}
	if ready == 0 || notReady == 0 {
		t.Fatalf("%d ready and %d not ready of %d cases: the table misses a side", ready, notReady, len(cases))
	}
	// Beside a ready volume and a pending one.
	mounted := setUp("p", "a", cm, "1", asw.Mounted)
	others := []readyCase{{desired: wanted("a", cm, "1"), actual: &mounted}, {desired: wanted("a", cm, "1")}}
	// A readiness reused from case to case (as a waiting request reuses
	// its own), its buffers holding a longer pod's volumes, decides the
	// same.
	var reused readiness
	for _, other := range others {
		for _, c := range cases {
			w := worldsOf(other, c)
			p, _ := w.Pod("p")
			if got := w.Ready("p"); got != p.Ready {
				t.Fatalf("Ready = %v, compute says %v: %s beside %s", got, p.Ready, c, other)
			}
			if got := reused.ready(w, "p"); got != p.Ready {
				t.Fatalf("a reused readiness = %v, compute says %v: %s beside %s", got, p.Ready, c, other)
			}
			alone := worldsOf(c)
			if got, want := reused.ready(alone, "p"), alone.Ready("p"); got != want {
				t.Fatalf("a reused readiness = %v, a fresh one %v: %s after %s beside it", got, want, c, other)
			}
		}
	}
	reused.forget()
	if len(reused.desired) != 0 || len(reused.actual) != 0 || reused.desired[:1][0].Spec != nil || reused.actual[:1][0].SubPaths != nil {
		t.Fatal("forget left the volumes looked at in the buffers")
	}
	t.Logf("%d cases, %d ready", len(cases), ready)
}

// TestReadyOfPodsNotDesired: a pod without volumes is ready; a pod that is
// Terminating, Held or unknown never is.
func TestReadyOfPodsNotDesired(t *testing.T) {
	w := Worlds{Desired: dsw.New(nil), Actual: asw.New(nil)}
	w.Desired.SetPod(dsw.Pod{UID: "none", Namespace: "ns", Name: "no-volumes"})
	w.Actual.NotePod("gone", "ns", "db", "manifests")
	w.Actual.Set(setUp("gone", "v", cm, "1", asw.Mounted))
	w.Desired.MarkRemoved("gone")
	w.Actual.AddPodDir("held", true)
	w.Actual.Set(setUp("held", "v", cm, "1", asw.Mounted))
	w.Desired.Hold("held", "the manifest directory is empty")
	for uid, want := range map[types.UID]bool{"none": true, "gone": false, "held": false, "unknown": false} {
		p, _ := w.Pod(string(uid))
		if got := w.Ready(uid); got != want || p.Ready != want {
			t.Errorf("pod %s: Ready = %v, status Ready = %v, want %v", uid, got, p.Ready, want)
		}
	}
}
