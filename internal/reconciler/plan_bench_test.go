package reconciler

import (
	"fmt"
	"slices"
	"testing"

	"go.uber.org/zap"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
)

// BenchmarkPlanSteadyState measures one reconcile plan over a node with 110
// pods (the kubelet's default maximum) of 6 volumes each, all mounted: the
// cost of a pass that finds nothing to do.
func BenchmarkPlanSteadyState(b *testing.B) {
	s := benchSnapshot(110, 6)
	b.ReportAllocs()
	for b.Loop() {
		if len(plan(s)) != 0 {
			b.Fatal("steady state planned work")
		}
	}
}

func benchSnapshot(pods, vols int) snapshot {
	s := snapshot{populated: true}
	for i := range pods {
		uid := types.UID(fmt.Sprintf("pod-%d", i))
		p := dsw.Pod{UID: uid, Namespace: "ns", Name: string(uid)}
		for j := range vols {
			name := fmt.Sprintf("v%d", j)
			p.Volumes = append(p.Volumes, dsw.Volume{Name: name, Plugin: cm, Version: "1"})
			s.actual = append(s.actual, asw.Volume{PodUID: uid, Name: name, Plugin: cm, Version: "1", State: asw.Mounted})
		}
		s.desired = append(s.desired, p)
		s.podDirs = append(s.podDirs, asw.PodDir{UID: uid})
	}
	return s
}

// BenchmarkPlanPass measures the planning of the passes that follow one
// event on a node of 110 and 1,000 pods with four mounted volumes each: a
// pod's content version moves on (the pass plans one refresh), then the
// refresh completes (the pass finds nothing to do).
func BenchmarkPlanPass(b *testing.B) {
	for _, pods := range []int{110, 1000} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) {
			desired, actual := dsw.New(nil), asw.New(nil)
			s := benchSnapshot(pods, 4)
			for _, p := range s.desired {
				desired.SetPod(p)
			}
			for _, a := range s.actual {
				actual.Set(a)
			}
			desired.MarkPopulated()
			r := New(Config{Desired: desired, Actual: actual, Logger: zap.NewNop()})
			r.planPass(true)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				p := s.desired[i%pods]
				p.Volumes = slices.Clone(p.Volumes)
				version := fmt.Sprint(i + 2)
				p.Volumes[0].Version = version
				desired.SetPod(p)
				if actions := r.planPass(false).actions; len(actions) != 1 || actions[0].kind != opRefresh {
					b.Fatalf("planned %v, want one refresh", actions)
				}
				done := s.actual[(i%pods)*4]
				done.Version = version
				actual.Set(done)
				if actions := r.planPass(false).actions; len(actions) != 0 {
					b.Fatalf("planned %v after the refresh, want nothing", actions)
				}
				i++
			}
		})
	}
}
