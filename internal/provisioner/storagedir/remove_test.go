package storagedir

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volume-agent/volume-agent/internal/mount"
)

func TestRemoveRemovesTheTree(t *testing.T) {
	base := t.TempDir()
	dir, err := Create(base, "ns/claim", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	mustMkdir(t, filepath.Join(dir, "a/b"))
	mustWrite(t, filepath.Join(dir, "a/b/f"))
	outside, unchanged := outsideDir(t)
	mustSymlink(t, outside, filepath.Join(dir, "a/escape")) // removed, not followed
	if err := Remove(context.Background(), mount.System{}, base, "ns/claim"); err != nil {
		t.Fatal(err)
	}
	if exists(dir) {
		t.Error("the directory is still there")
	}
	if !exists(filepath.Join(base, "ns")) {
		t.Error("Remove removed the parent too")
	}
	unchanged()
	// Missing now: removing again succeeds, and so does a missing parent.
	for _, rel := range []string{"ns/claim", "gone/claim"} {
		if err := Remove(context.Background(), mount.System{}, base, rel); err != nil {
			t.Errorf("Remove of missing %s = %v, want nil", rel, err)
		}
	}
}

func TestRemoveRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		base  func(t *testing.T, base string) string
		rel   string
		plant func(t *testing.T, base, outside string)
		want  string
	}{
		{"the base itself", nil, ".", nil, "not the base itself"},
		{"an empty path", nil, "", nil, "not the base itself"},
		{"a path out of the base", nil, "../x", nil, `".."`},
		{"a missing base", func(t *testing.T, base string) string { return filepath.Join(base, "missing") }, "claim", nil, "no such file"},
		{"a symlink at the directory", nil, "claim", func(t *testing.T, base, outside string) {
			mustSymlink(t, outside, filepath.Join(base, "claim"))
		}, "symlink"},
		{"a symlink at an intermediate component", nil, "ns/claim", func(t *testing.T, base, outside string) {
			mustMkdir(t, filepath.Join(outside, "claim"))
			mustSymlink(t, outside, filepath.Join(base, "ns"))
		}, "symlink"},
		{"a file at the directory", nil, "claim", func(t *testing.T, base, outside string) {
			mustWrite(t, filepath.Join(base, "claim"))
		}, "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			outside, _ := outsideDir(t)
			if tc.plant != nil {
				tc.plant(t, base, outside)
			}
			before, beforeOutside := tree(t, base), tree(t, outside)
			b := base
			if tc.base != nil {
				b = tc.base(t, base)
			}
			err := Remove(context.Background(), mount.System{}, b, tc.rel)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Remove = %v, want an error saying %q", err, tc.want)
			}
			if len(tree(t, base)) != len(before) || len(tree(t, outside)) != len(beforeOutside) {
				t.Error("Remove changed something although it failed")
			}
		})
	}
}

func TestRemoveRefusesAMountBelow(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	dir, err := Create(base, "claim", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "data"))
	mustMkdir(t, filepath.Join(dir, "sub/mnt"))
	bindMount(t, filepath.Join(dir, "sub/mnt"))
	mustWrite(t, filepath.Join(dir, "sub/mnt/on-the-mount"))
	before := tree(t, base)
	err = Remove(context.Background(), mount.System{}, base, "claim")
	if err == nil || !strings.Contains(err.Error(), "sub/mnt") {
		t.Fatalf("Remove = %v, want an error naming the mount", err)
	}
	if after := tree(t, base); len(after) != len(before) {
		t.Errorf("Remove changed the tree: before %v, after %v", before, after)
	}
}
