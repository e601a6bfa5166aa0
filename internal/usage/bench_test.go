package usage

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/dsw"
)

// BenchmarkWalk1000SmallDirs walks 1,000 directories of one small file
// each (2,001 entries), unpaced: the CPU cost of a walk per entry.
func BenchmarkWalk1000SmallDirs(b *testing.B) {
	dir := b.TempDir()
	for i := range 1000 {
		sub := filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sub, "f"), []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r, err := newWalker(context.Background()).walk(dir)
		if err != nil || r.inodes != 2001 {
			b.Fatalf("walk: %d inodes, %v", r.inodes, err)
		}
	}
}

// BenchmarkPass110Volumes is one pass over a node at the kubelet's
// default maximum of 110 pods, one disk emptyDir each holding 10 small
// files: the CPU a period costs for usage, unpaced (the pacing only
// spreads it).
func BenchmarkPass110Volumes(b *testing.B) {
	root := b.TempDir()
	tg := &targets{}
	var list []Target
	for i := range 110 {
		dir := filepath.Join(root, strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for j := range 10 {
			if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(j)), []byte("x"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		list = append(list, Target{Key: dsw.Key{PodUID: types.UID(strconv.Itoa(i)), Volume: "scratch"}, Path: dir})
	}
	tg.set(list...)
	u := New(Config{Targets: tg, Period: time.Minute, EntriesPerSecond: -1})
	u.sync(time.Now())
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for _, s := range u.slots {
			u.measure(context.Background(), s)
		}
	}
	b.StopTimer()
	if len(u.Stats()) != 110 {
		b.Fatalf("%d volumes measured, want 110", len(u.Stats()))
	}
}
