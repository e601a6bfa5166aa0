package hostpath_test

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
)

// BenchmarkHostPathCheck sets up a hostPath volume of type Directory in
// each of checkModes: in process (a syscall's cost, the reference), in a
// process per check (a fork and an exec, as before issue 21), and in the
// agent's pool of long-lived checkers. "parallel" runs as many set-ups
// at once as GOMAXPROCS, as a burst of pods does.
func BenchmarkHostPathCheck(b *testing.B) {
	dir := b.TempDir()
	for _, mode := range checkModes {
		p := &hostpath.Plugin{Checker: mode.checker, Checkers: mode.checkers}
		b.Run(mode.name, func(b *testing.B) {
			for b.Loop() {
				setUp(b, p, dir)
			}
		})
		b.Run(mode.name+"/parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					setUp(b, p, dir)
				}
			})
		})
	}
}

func setUp(b *testing.B, p *hostpath.Plugin, dir string) {
	if _, err := p.SetUp(context.Background(), spec(dir, v1.HostPathDirectory), ""); err != nil {
		b.Error(err)
	}
}
