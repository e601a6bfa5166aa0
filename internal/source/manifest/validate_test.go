package manifest

import (
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a-good.yaml", pod("web", "v1")+"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
	writeFile(t, dir, "b-typo.yaml", cachePod("sizeLimt", "1Gi"))
	writeFile(t, dir, "c-copy.yaml", pod("web", "v2"))
	writeFresh(t, dir, "d-fresh.json", `{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}`)
	writeFile(t, dir, "notes.txt", "not a manifest")
	writeFile(t, dir, ".hidden.yaml", "not: [parsed")
	r, err := Validate(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.Join(dir, "b-typo.yaml") + ":11: spec.volumes[0].emptyDir.sizeLimt: unknown field (did you mean sizeLimit?)",
		filepath.Join(dir, "c-copy.yaml") + ":1: duplicate Pod default/web: already defined at a-good.yaml:1",
	}
	if r.Files != 4 || r.Objects != 3 || !slices.Equal(r.Problems, want) {
		t.Errorf("report %d files, %d objects, problems\n%s\nwant 4 files, 3 objects, problems\n%s",
			r.Files, r.Objects, strings.Join(r.Problems, "\n"), strings.Join(want, "\n"))
	}
}

// TestValidateCleanAndMissingDirectory: a directory without problems, and
// one that cannot be listed.
func TestValidateCleanAndMissingDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "web.yaml", pod("web", "v1"))
	if r, err := Validate(dir); err != nil || r.Files != 1 || r.Objects != 1 || len(r.Problems) != 0 {
		t.Errorf("Validate = %+v, %v; want 1 file, 1 object, no problems", r, err)
	}
	if _, err := Validate(filepath.Join(dir, "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Validate of a missing directory: %v", err)
	}
}
