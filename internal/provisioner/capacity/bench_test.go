package capacity

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
)

// BenchmarkCreate measures Create of a 64 MiB volume on each backend:
// a subvolume with its qgroup limit, and a formatted, attached and
// mounted image. The volumes are deleted outside the timed part.
func BenchmarkCreate(b *testing.B) {
	for _, bc := range []struct {
		name string
		root func(testing.TB) string
	}{
		{"btrfs", func(tb testing.TB) string { return btrfsRoot(tb, true) }},
		{"image", imageRoot},
	} {
		b.Run(bc.name, func(b *testing.B) {
			be, _ := open(b, Config{Root: bc.root(b)})
			i := 0
			for b.Loop() {
				name := "vol-" + strconv.Itoa(i)
				i++
				if _, err := be.Create(b.Context(), name, 64<<20); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := be.Delete(b.Context(), name); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkSnapshot measures, for a 1 GiB volume holding 512 MiB, on
// btrfs (subvolume snapshots), on images with reflinks (a btrfs root)
// and on images with sparse copies (an ext4 root): Snapshot, CreateFrom
// of the snapshot (restore) and CreateFrom of the volume (clone). What
// each makes is deleted outside the timed part. An image snapshot also
// reports how long the volume's writes were held (frozen-ms/op).
func BenchmarkSnapshot(b *testing.B) {
	for _, bc := range []struct {
		name  string
		root  func(testing.TB) string
		image bool
	}{
		{"btrfs", func(tb testing.TB) string { return btrfsRootOf(tb, true, "4G") }, false},
		{"image-reflink", func(tb testing.TB) string { return imageIn(tb, btrfsRootOf(tb, true, "4G")) }, true},
		{"image-sparse", func(tb testing.TB) string { return imageIn(tb, ext4RootOf(tb, "4G")) }, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			be, logs := open(b, Config{Root: bc.root(b), ForceImage: bc.image})
			s := be.(Snapshotter)
			ctx := b.Context()
			dir, err := be.Create(ctx, "vol", 1<<30)
			if err != nil {
				b.Fatal(err)
			}
			writeFile(b, filepath.Join(dir, "data"), 512)
			unix.Sync()
			b.Run("snapshot", func(b *testing.B) {
				const frozen = "image volume frozen for a copy"
				before := logs.FilterMessage(frozen).Len()
				i := 0
				for b.Loop() {
					name := "snap-" + strconv.Itoa(i)
					i++
					if _, err := s.Snapshot(ctx, "vol", name); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if err := s.DeleteSnapshot(ctx, name); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				reportFrozen(b, logs.FilterMessage(frozen).All()[before:])
			})
			if _, err := s.Snapshot(ctx, "vol", "snap"); err != nil {
				b.Fatal(err)
			}
			for _, src := range []Source{{Snapshot: "snap"}, {Volume: "vol"}} {
				what := "restore"
				if src.Volume != "" {
					what = "clone"
				}
				b.Run(what, func(b *testing.B) {
					i := 0
					for b.Loop() {
						name := what + "-" + strconv.Itoa(i)
						i++
						if _, err := s.CreateFrom(ctx, name, 1<<30, src); err != nil {
							b.Fatal(err)
						}
						b.StopTimer()
						if err := be.Delete(ctx, name); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
				})
			}
			if err := s.DeleteSnapshot(ctx, "snap"); err != nil {
				b.Fatal(err)
			}
			if err := be.Delete(ctx, "vol"); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// reportFrozen reports the mean time an image volume was frozen for the
// copies whose log entries are given.
func reportFrozen(b *testing.B, entries []observer.LoggedEntry) {
	if len(entries) == 0 {
		return
	}
	var total time.Duration
	for _, e := range entries {
		if d, ok := e.ContextMap()["frozen"].(time.Duration); ok {
			total += d
		}
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(len(entries)), "frozen-ms/op")
}
