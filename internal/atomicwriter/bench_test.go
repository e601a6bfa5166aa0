package atomicwriter

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func benchPayload(fill byte) map[string]File {
	payload := map[string]File{}
	for i := range 10 {
		payload[fmt.Sprintf("key%d", i)] = File{Data: bytes.Repeat([]byte{fill}, 1024), Mode: 0o644}
	}
	return payload
}

// BenchmarkWrite writes 10 files of 1 KiB: "changed" alternates between two
// payloads, so every write builds a new directory and switches ..data;
// "unchanged" rewrites the same payload, which only compares.
func BenchmarkWrite(b *testing.B) {
	for _, mode := range []string{"changed", "unchanged"} {
		b.Run(mode, func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "vol")
			if err := os.Mkdir(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			w := New(dir)
			payloads := []map[string]File{benchPayload('a'), benchPayload('b')}
			i := 0
			for b.Loop() {
				if _, err := w.Write(payloads[i%2]); err != nil {
					b.Fatal(err)
				}
				if mode == "changed" {
					i++
				}
			}
		})
	}
}
