package btrfs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/volume-agent/volume-agent/internal/btrfs/btrfstest"
)

// benchVolume makes a volume of files files in 100 directories, with 3
// nested subvolumes, beside others other volumes, and enforces a limit.
func benchVolume(b *testing.B, files, others int) string {
	b.Helper()
	root := btrfstest.Mount(b, true)
	tool := Tool{}
	for i := range others {
		if err := tool.CreateSubvolume(b.Context(), filepath.Join(root, fmt.Sprintf("other-%d", i))); err != nil {
			b.Fatal(err)
		}
	}
	vol := filepath.Join(root, "vol")
	if err := tool.CreateSubvolume(b.Context(), vol); err != nil {
		b.Fatal(err)
	}
	for i := range files {
		dir := filepath.Join(vol, fmt.Sprintf("d%d", i%100))
		if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // G301: a benchmark's volume
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), nil, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	for _, n := range []string{"a", "a/b", "c"} {
		if err := tool.CreateSubvolume(b.Context(), filepath.Join(vol, n)); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := tool.Enforce(b.Context(), vol, 1<<30); err != nil {
		b.Fatal(err)
	}
	return vol
}

// BenchmarkNested: the search for the subvolumes below a volume costs
// one tree search per subvolume found, whatever the files: compare
// 100 and 100,000 files (and 200 other subvolumes on the file system).
func BenchmarkNested(b *testing.B) {
	for _, files := range []int{100, 100_000} {
		b.Run(fmt.Sprintf("files=%d", files), func(b *testing.B) {
			vol := benchVolume(b, files, 200)
			b.ResetTimer()
			for range b.N {
				if _, nested, err := Nested(vol); err != nil || len(nested) != 3 {
					b.Fatal(nested, err)
				}
			}
		})
	}
}

// BenchmarkEnforce: a usage pass's Enforce when nothing is to be done:
// the search and one btrfs qgroup show of every qgroup (204 here).
func BenchmarkEnforce(b *testing.B) {
	vol := benchVolume(b, 100, 200)
	b.ResetTimer()
	for range b.N {
		if l, err := (Tool{}).Enforce(b.Context(), vol, 1<<30); err != nil || l.Changed {
			b.Fatal(l, err)
		}
	}
}

// BenchmarkQgroupOf: what a usage pass cost before nested subvolumes
// were limited (one btrfs qgroup show -f of the volume), for comparison.
func BenchmarkQgroupOf(b *testing.B) {
	vol := benchVolume(b, 100, 200)
	b.ResetTimer()
	for range b.N {
		if _, err := (Tool{}).QgroupOf(b.Context(), vol, 0); err != nil {
			b.Fatal(err)
		}
	}
}
