package usage

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/btrfs/btrfstest"
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
		u.measure(context.Background(), slices.Collect(maps.Values(u.slots))...)
	}
	b.StopTimer()
	if len(u.Stats()) != 110 {
		b.Fatalf("%d volumes measured, want 110", len(u.Stats()))
	}
}

// BenchmarkPassMixed is one unpaced measurement pass over 110 and 1,000
// volumes: 110 tmpfs mounts (measured by statfs; 1,000 mounts would
// mostly measure the mount table) and the rest plain directories of 10
// small files each (walked): half and half at 110, 110 and 890 at 1,000.
func BenchmarkPassMixed(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root to mount tmpfs")
	}
	for _, tc := range []struct{ volumes, tmpfs int }{{110, 55}, {1000, 110}} {
		b.Run(strconv.Itoa(tc.volumes), func(b *testing.B) {
			root := b.TempDir()
			var list []Target
			for i := range tc.volumes {
				dir := filepath.Join(root, strconv.Itoa(i))
				if err := os.Mkdir(dir, 0o755); err != nil {
					b.Fatal(err)
				}
				if i < tc.tmpfs {
					if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
				}
				for j := range 10 {
					if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(j)), []byte("x"), 0o644); err != nil {
						b.Fatal(err)
					}
				}
				list = append(list, Target{Key: dsw.Key{PodUID: types.UID(strconv.Itoa(i)), Volume: "v"}, Path: dir})
			}
			benchPass(b, list)
		})
	}
}

// BenchmarkPassQuota is one measurement pass over 20 and 200 subvolumes
// with a qgroup limit on a loop-backed btrfs: per volume the check of what
// it is, one run of btrfs qgroup show and a statfs. btrfs(8) reads every
// qgroup of the file system to list one, so the cost per volume may grow
// with their number: the two sizes show by how much.
func BenchmarkPassQuota(b *testing.B) {
	for _, n := range []int{20, 200} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			mnt := btrfstest.Mount(b, true)
			var list []Target
			for i := range n {
				dir := filepath.Join(mnt, strconv.Itoa(i))
				subvolume(b, dir, "10M")
				list = append(list, Target{Key: dsw.Key{PodUID: types.UID(strconv.Itoa(i)), Volume: "v"}, Path: dir})
			}
			benchPass(b, list)
		})
	}
}

// benchPass measures every target once per iteration, unpaced.
func benchPass(b *testing.B, list []Target) {
	b.Helper()
	tg := &targets{}
	tg.set(list...)
	u := New(Config{Targets: tg, Period: time.Minute, EntriesPerSecond: -1})
	u.sync(time.Now())
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		u.measure(context.Background(), slices.Collect(maps.Values(u.slots))...)
	}
	b.StopTimer()
	if len(u.Stats()) != len(list) {
		b.Fatalf("%d volumes measured, want %d", len(u.Stats()), len(list))
	}
}
