package durable

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestWriteRemoveNames(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFile(dir, "a.json", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(dir, "a.json", []byte("2")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a.json")); err != nil || string(b) != "2" {
		t.Fatalf("record: %q, %v", b, err)
	}
	// A write a crash cut short, a foreign file, a symlink.
	for _, n := range []string{".b.json.tmp", "c.txt"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "d.json")); err != nil {
		t.Fatal(err)
	}
	names, err := Names(dir, ".json")
	if err != nil || !slices.Equal(names, []string{"a.json"}) {
		t.Fatalf("Names = %v, %v", names, err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".b.json.tmp")); !os.IsNotExist(err) {
		t.Errorf("the cut-short write is still there: %v", err)
	}
	if err := WriteFile(dir, "d.json", []byte("x")); err != nil {
		t.Fatal(err) // replaces the symlink itself, never writes through it
	}
	if fi, err := os.Lstat(filepath.Join(dir, "d.json")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("d.json: %v, %v; want a regular file", fi, err)
	}
	for range 2 {
		if err := Remove(dir, "a.json"); err != nil {
			t.Fatal(err)
		}
	}
	if names, _ := Names(filepath.Join(dir, "missing"), ".json"); names != nil {
		t.Errorf("Names of a missing directory = %v", names)
	}
	for _, bad := range []string{"", "..", "x/y", ".hidden"} {
		if err := WriteFile(dir, bad, nil); err == nil {
			t.Errorf("WriteFile(%q) succeeded", bad)
		}
	}
}
