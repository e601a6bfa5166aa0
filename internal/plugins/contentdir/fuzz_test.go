package contentdir

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/atomicwriter"
)

// FuzzItemPaths checks the paths configMap, secret and projected volumes
// write, from items (validated by ValidateItems when the pod is read) and
// from the keys of the object itself (validated by Project): a path either
// is refused with an error naming its field or key, or is relative, clean,
// inside the volume and never a "..name" of the writer's own, and the
// payload it gives is written inside the volume directory only.
// Seeds: the f.Add calls and testdata/fuzz/FuzzItemPaths.
func FuzzItemPaths(f *testing.F) {
	f.Add("key", "dir/file", "other", int32(0o644))
	f.Add("a", "../escape", "..data", int32(0o777))
	f.Add("..data", "a/./b", "a//b", int32(-1))
	f.Add("a/b", "/etc/passwd", "a", int32(0o1000))
	f.Add("x", "a", "a/b", int32(0))
	f.Fuzz(func(t *testing.T, key, p1, p2 string, mode int32) {
		items := []v1.KeyToPath{{Key: key, Path: p1, Mode: &mode}, {Key: "k2", Path: p2}}
		data := map[string][]byte{key: []byte("v1"), "k2": []byte("v2")}

		if err := ValidateItems("configMap", items, nil); err != nil {
			if !strings.HasPrefix(err.Error(), "configMap.items[") {
				t.Fatalf("ValidateItems: error %q does not name the item's field", err)
			}
		} else {
			assertInside(t, p1)
			assertInside(t, p2)
			if mode < 0 || mode > 0o777 {
				t.Fatalf("ValidateItems accepted mode %#o", mode)
			}
			payload, err := Project("configMap ns/cm", data, items, DefaultMode, false)
			if err != nil {
				if p1 != p2 {
					t.Fatalf("Project of valid items: %v", err)
				}
			} else {
				writeInside(t, payload)
			}
		}

		payload, err := Project("configMap ns/cm", data, nil, DefaultMode, false)
		if err != nil {
			if !strings.Contains(err.Error(), "key ") {
				t.Fatalf("Project: error %q does not name the key", err)
			}
			return
		}
		for p := range payload {
			assertInside(t, p)
		}
		writeInside(t, payload)
	})
}

// assertInside fails unless p names a file strictly inside the volume.
func assertInside(t *testing.T, p string) {
	t.Helper()
	if p == "" || path.IsAbs(p) || strings.HasPrefix(p, "..") || path.Clean(p) != p ||
		!filepath.IsLocal(p) || strings.IndexByte(p, 0) >= 0 {
		t.Fatalf("accepted payload path %q", p)
	}
	for _, elem := range strings.Split(p, "/") {
		if elem == "" || elem == "." || elem == ".." {
			t.Fatalf("accepted payload path %q with element %q", p, elem)
		}
	}
}

// writeInside writes payload into a volume directory and checks that
// nothing appeared beside it. A payload whose paths cannot all exist (a
// file that is also a directory) must be refused as invalid.
func writeInside(t *testing.T, payload Payload) {
	t.Helper()
	top := t.TempDir()
	dir := filepath.Join(top, "vol")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := atomicwriter.New(dir).Write(payload); err != nil && !errors.Is(err, atomicwriter.ErrInvalidPayload) {
		t.Fatalf("Write: %v", err)
	}
	entries, err := os.ReadDir(top)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("the write left %d entries beside the volume directory", len(entries)-1)
	}
	for p := range payload {
		if _, err := os.Lstat(filepath.Join(dir, p)); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("lstat %s: %v", p, err)
		}
	}
}
