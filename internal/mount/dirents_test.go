package mount

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadDirents: every entry of a directory larger than one buffer,
// with its type, and neither "." nor "..".
func TestReadDirents(t *testing.T) {
	dir := t.TempDir()
	want := map[string]uint8{}
	for i := range 300 { // 300 names of 100 bytes: several 8 KiB reads
		name := fmt.Sprintf("%03d-%s", i, strings.Repeat("x", 96))
		if i%3 == 0 {
			mustMkdir(t, filepath.Join(dir, name))
			want[name] = unix.DT_DIR
			continue
		}
		mustWrite(t, filepath.Join(dir, name))
		want[name] = unix.DT_REG
	}
	if err := os.Symlink("000", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	want["link"] = unix.DT_LNK
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	got := map[string]uint8{}
	batches := 0
	err = ReadDirents(fd, nil, func(batch []Dirent) error {
		batches++
		for _, e := range batch {
			if _, dup := got[e.Name]; dup {
				t.Errorf("%s listed twice", e.Name)
			}
			got[e.Name] = e.Type
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Errorf("got %d entries, want %d (or types differ)", len(got), len(want))
	}
	if batches < 2 {
		t.Errorf("%d batches: the test no longer reads past one buffer", batches)
	}
}
