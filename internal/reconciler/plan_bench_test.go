package reconciler

import (
	"fmt"
	"testing"

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
