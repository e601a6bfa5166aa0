package usage

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
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
