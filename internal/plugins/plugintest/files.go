package plugintest

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// File is the content and permission bits a volume file must have.
type File struct {
	Data string
	Mode os.FileMode
}

// CheckFiles checks that the content volume in dir shows exactly the files
// in want (slash-separated relative path → File): its top-level names are
// those of want, and its current payload holds exactly want's files.
func CheckFiles(t *testing.T, dir string, want map[string]File) {
	t.Helper()
	var top []string
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "..") {
			top = append(top, e.Name())
		}
	}
	wantTop := map[string]bool{}
	for p := range want {
		wantTop[strings.Split(p, "/")[0]] = true
	}
	if !slices.Equal(top, slices.Sorted(maps.Keys(wantTop))) {
		t.Errorf("top-level names = %q, want %q", top, slices.Sorted(maps.Keys(wantTop)))
	}
	got := map[string]File{}
	data := filepath.Join(dir, "..data")
	err = filepath.WalkDir(data+"/", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		content, err := os.ReadFile(path)
		rel, _ := filepath.Rel(data, path)
		got[filepath.ToSlash(rel)] = File{Data: string(content), Mode: info.Mode()}
		return err
	})
	if err != nil && !(os.IsNotExist(err) && len(want) == 0) {
		t.Fatalf("walk %s: %v", data, err)
	}
	if !maps.Equal(got, want) {
		t.Errorf("files = %q, want %q", got, want)
	}
	for p, f := range want { // as a container reads them, through the links
		if content, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(content) != f.Data {
			t.Errorf("reading %s through the volume's links: %q, %v; want %q", p, content, err, f.Data)
		}
	}
}
