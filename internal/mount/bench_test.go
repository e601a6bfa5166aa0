package mount

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// makeContentTree makes in dir what the atomic writer leaves in a content
// volume: ..data pointing to a timestamped directory holding the files,
// and a symlink per file through ..data.
func makeContentTree(b *testing.B, dir string) {
	b.Helper()
	ts := filepath.Join(dir, "..2026_11_29_00_00_00.1")
	if err := os.MkdirAll(ts, 0o755); err != nil {
		b.Fatal(err)
	}
	for i := range 3 {
		k := "key" + strconv.Itoa(i)
		if err := os.WriteFile(filepath.Join(ts, k), []byte("v"), 0o600); err != nil {
			b.Fatal(err)
		}
		if err := os.Symlink("..data/"+k, filepath.Join(dir, k)); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRemoveDirContent: the teardown of a configMap volume on disk
// (a scan for mounts, then the walk that removes it). Its allocations are
// what a teardown burst leaves the collector.
func BenchmarkRemoveDirContent(b *testing.B) {
	base := b.TempDir()
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := filepath.Join(base, "v"+strconv.Itoa(i))
		makeContentTree(b, dir)
		b.StartTimer()
		if err := RemoveDir(ctx, System{}, dir); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRemoveDirTmpfs: the teardown of a secret volume (a tmpfs:
// unmount, then rmdir of its mount point). Needs root.
func BenchmarkRemoveDirTmpfs(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("mounts a tmpfs: needs root")
	}
	base := b.TempDir()
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := filepath.Join(base, "v"+strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := (System{}).Mount(ctx, Mount{Type: "tmpfs", Source: "tmpfs", Options: []string{"size=1m"}}, dir); err != nil {
			b.Fatal(err)
		}
		makeContentTree(b, dir)
		b.StartTimer()
		if err := RemoveDir(ctx, System{}, dir); err != nil {
			b.Fatal(err)
		}
	}
}
