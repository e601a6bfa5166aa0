package atomicwriter

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// newVolume returns an empty volume directory and a Writer for it.
func newVolume(t *testing.T) (string, *Writer) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "vol")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, New(dir)
}

func mustWrite(t *testing.T, w *Writer, payload map[string]File) bool {
	t.Helper()
	if writeNewFirst && !written[w] {
		written[w] = true
		return mustWriteNew(t, w, payload)
	}
	changed, err := w.Write(payload)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	return changed
}

func file(data string, mode os.FileMode) File {
	return File{Data: []byte(data), Mode: mode}
}

func id(v int64) *int64 { return &v }

// dataTarget returns what ..data points at and checks it is a timestamped
// directory of the volume.
func dataTarget(t *testing.T, dir string) string {
	t.Helper()
	target, err := os.Readlink(filepath.Join(dir, dataLink))
	if err != nil {
		t.Fatalf("readlink ..data: %v", err)
	}
	if !tsDirPattern.MatchString(target) {
		t.Fatalf("..data -> %q, want a timestamped directory name", target)
	}
	return target
}

func readLink(t *testing.T, name string) string {
	t.Helper()
	target, err := os.Readlink(name)
	if err != nil {
		t.Fatalf("readlink: %v", err)
	}
	return target
}

// assertContent reads rel through the volume's links.
func assertContent(t *testing.T, dir, rel, want string) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	if string(got) != want {
		t.Fatalf("%s = %q, want %q", rel, got, want)
	}
}

func assertPerm(t *testing.T, name string, want os.FileMode) {
	t.Helper()
	info, err := os.Lstat(name)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Mode().Perm(); got != want {
		t.Errorf("%s: mode %#o, want %#o", name, got, want)
	}
}

func assertMissing(t *testing.T, name string) {
	t.Helper()
	if _, err := os.Lstat(name); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s: want it gone, Lstat err = %v", name, err)
	}
}

// entries lists the volume directory's top-level names, sorted.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// entry is what snapshot records of one file system entry.
type entry struct {
	mode     fs.FileMode
	uid, gid uint32
	content  string // file content or link target
}

// snapshot records every entry under dir without following symlinks, to
// prove that a write changed nothing there.
func snapshot(t *testing.T, dir string) map[string]entry {
	t.Helper()
	snap := map[string]entry{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		e := entry{mode: info.Mode(), uid: st.Uid, gid: st.Gid}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			e.content, err = os.Readlink(p)
		case info.Mode().IsRegular():
			var b []byte
			b, err = os.ReadFile(p)
			e.content = string(b)
		}
		snap[p] = e
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func assertSameSnapshot(t *testing.T, before, after map[string]entry) {
	t.Helper()
	for p, e := range before {
		if a, ok := after[p]; !ok || a != e {
			t.Errorf("%s changed: before %+v, after %+v (present %v)", p, e, a, ok)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s appeared", p)
		}
	}
}

func assertEntries(t *testing.T, dir string, want ...string) {
	t.Helper()
	got := entries(t, dir)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("volume entries = %v, want %v", got, want)
	}
}

func requireRoot(t *testing.T, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("skipping %s: needs root (run the tests as root, as CI does)", what)
	}
}

func assertNoSecret(t *testing.T, err error, secret string) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), secret) {
		t.Fatalf("error leaks file content: %v", err)
	}
}
