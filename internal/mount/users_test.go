package mount

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestMountsOf(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	data := filepath.Join(base, "data")
	sub := filepath.Join(data, "sub")
	other := filepath.Join(base, "data-other") // a prefix of the name, not of the path
	for _, d := range []string{sub, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := MountsOf(t.Context(), data); err != nil || len(got) != 0 {
		t.Fatalf("MountsOf an unmounted tree = %v, %v; want none", got, err)
	}
	whole, part, unrelated := filepath.Join(base, "whole"), filepath.Join(base, "part"), filepath.Join(base, "unrelated")
	for _, m := range [][2]string{{data, whole}, {sub, part}, {other, unrelated}} {
		mustMkdir(t, m[1])
		bind(t, m[0], m[1])
	}
	got, err := MountsOf(t.Context(), data)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{part, whole}; !slices.Equal(got, want) {
		t.Errorf("MountsOf(%s) = %v, want %v", data, got, want)
	}
	// Renamed, the tree is still shown by its binds: the table follows.
	moved := filepath.Join(base, ".moved")
	if err := os.Rename(data, moved); err != nil {
		t.Fatal(err)
	}
	if got, err := MountsOf(t.Context(), moved); err != nil || len(got) != 2 {
		t.Errorf("MountsOf the renamed tree = %v, %v; want its 2 binds", got, err)
	}
	if got, err := MountsOf(t.Context(), data); err != nil || len(got) != 0 {
		t.Errorf("MountsOf the old, missing name = %v, %v; want none", got, err)
	}
}
