package storagedir

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// BenchmarkCreate measures Create of a plain directory volume (a class
// with enforce: "false"), the local provisioner's set-up of one, for
// comparison with capacity's BenchmarkCreate of a subvolume and an
// image. The directories are removed outside the timed part.
func BenchmarkCreate(b *testing.B) {
	base := b.TempDir()
	i := 0
	for b.Loop() {
		name := "pvc-" + strconv.Itoa(i)
		i++
		if _, err := Create(base, name, 0o777); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := os.Remove(filepath.Join(base, name)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
