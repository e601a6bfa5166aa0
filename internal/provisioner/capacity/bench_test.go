package capacity

import (
	"strconv"
	"testing"
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
