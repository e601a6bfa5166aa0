package atomicwriter

import (
	"errors"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzValidatePath holds ValidatePath to its contract: a path it accepts is
// relative, clean, local to the volume, does not start with ".." and has no
// element that is empty, "." or ".."; a path it refuses gets an
// ErrInvalidPayload error of bounded length. Seeds: the f.Add calls and
// testdata/fuzz/FuzzValidatePath.
func FuzzValidatePath(f *testing.F) {
	for _, p := range []string{
		"key", "a/b/c", "dir/..hidden", ".hidden", "a/...", "", "/", "/abs", "..", "..data", "../x",
		"a/../b", "a//b", "a/./b", "a/", "./a", "a\x00b", "a/..", "...", "..a/b", "a\\..\\b",
		strings.Repeat("n", 256), strings.Repeat("a/", 2048),
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		err := ValidatePath(p)
		if err != nil {
			if !errors.Is(err, ErrInvalidPayload) {
				t.Fatalf("ValidatePath(%q) = %v, does not wrap ErrInvalidPayload", p, err)
			}
			// The path is cut to 64 bytes and quoted: at most 4 characters
			// a byte (\x1c), and the reason.
			if len(err.Error()) > 512 {
				t.Fatalf("ValidatePath(%q): error of %d bytes; long paths must be shortened", p, len(err.Error()))
			}
			return
		}
		assertInsideVolume(t, p)
	})
}

// assertInsideVolume fails unless p, accepted as a payload path, names a
// file strictly inside any volume directory and cannot collide with the
// writer's own entries.
func assertInsideVolume(t *testing.T, p string) {
	t.Helper()
	switch {
	case p == "" || path.IsAbs(p) || strings.HasPrefix(p, ".."):
		t.Fatalf("accepted %q: empty, absolute or starting with '..'", p)
	case strings.IndexByte(p, 0) >= 0:
		t.Fatalf("accepted %q with a NUL byte", p)
	case path.Clean(p) != p || !filepath.IsLocal(p):
		t.Fatalf("accepted %q, which is not clean and local (Clean gives %q)", p, path.Clean(p))
	case len(p) > maxPathLength:
		t.Fatalf("accepted a path of %d bytes", len(p))
	}
	for _, elem := range strings.Split(p, "/") {
		if elem == "" || elem == "." || elem == ".." || len(elem) > maxNameLength {
			t.Fatalf("accepted %q with element %q", p, elem)
		}
	}
	const vol = "/var/lib/vol"
	if joined := path.Join(vol, p); !strings.HasPrefix(joined, vol+"/") || joined != vol+"/"+p {
		t.Fatalf("accepted %q, which joins to %q outside %s", p, joined, vol)
	}
}
