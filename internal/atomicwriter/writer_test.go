package atomicwriter

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func TestWriteLayout(t *testing.T) {
	dir, w := newVolume(t)
	changed := mustWrite(t, w, map[string]File{
		"key1":     file("one", 0o644),
		"key2":     file("two", 0o644),
		"dir/a/b":  file("nested", 0o644),
		"dir/c":    file("c", 0o644),
		"other/x":  file("x", 0o644),
		"dir/..zz": file("dots", 0o644),
	})
	if !changed {
		t.Fatal("first Write reported no change")
	}
	ts := dataTarget(t, dir)
	assertEntries(t, dir, ts, dataLink, "key1", "key2", "dir", "other")
	for _, name := range []string{"key1", "key2", "dir", "other"} {
		if got := readLink(t, filepath.Join(dir, name)); got != "..data/"+name {
			t.Errorf("%s -> %q, want ..data/%s", name, got, name)
		}
	}
	assertContent(t, dir, "key1", "one")
	assertContent(t, dir, "dir/a/b", "nested")
	assertContent(t, dir, "dir/..zz", "dots")
	assertContent(t, dir, filepath.Join(ts, "other/x"), "x")
}

func TestWriteModes(t *testing.T) {
	old := syscall.Umask(0o077) // prove the modes do not depend on the umask
	processUmask = sync.OnceValues(readUmask)
	t.Cleanup(func() { syscall.Umask(old); processUmask = sync.OnceValues(readUmask) })
	dir, w := newVolume(t)
	modes := map[string]os.FileMode{"rw": 0o644, "ro": 0o400, "all": 0o777, "none": 0, "g": 0o640, "d/e/x": 0o755}
	payload := map[string]File{}
	for p, m := range modes {
		payload[p] = file("data", m)
	}
	mustWrite(t, w, payload)
	ts := filepath.Join(dir, dataTarget(t, dir))
	for p, m := range modes {
		assertPerm(t, filepath.Join(ts, p), m)
	}
	for _, d := range []string{"", "d", "d/e"} {
		assertPerm(t, filepath.Join(ts, d), 0o755)
	}
}

func TestWriteChangeDetection(t *testing.T) {
	base := map[string]File{"a": file("A", 0o644), "d/b": file("B", 0o600)}
	tests := []struct {
		name    string
		edit    func(p map[string]File)
		changed bool
	}{
		{"same", func(map[string]File) {}, false},
		{"content", func(p map[string]File) { p["a"] = file("X", 0o644) }, true},
		{"content same size", func(p map[string]File) { p["d/b"] = file("C", 0o600) }, true},
		{"mode", func(p map[string]File) { p["a"] = file("A", 0o640) }, true},
		{"key removed", func(p map[string]File) { delete(p, "d/b") }, true},
		{"key added", func(p map[string]File) { p["n"] = file("", 0o644) }, true},
		{"nested key added", func(p map[string]File) { p["d/e/f"] = file("", 0o644) }, true},
		{"key moved", func(p map[string]File) { delete(p, "d/b"); p["d2/b"] = file("B", 0o600) }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, w := newVolume(t)
			mustWrite(t, w, base)
			before := dataTarget(t, dir)
			next := map[string]File{}
			for k, v := range base {
				next[k] = v
			}
			tt.edit(next)
			if got := mustWrite(t, w, next); got != tt.changed {
				t.Fatalf("changed = %v, want %v", got, tt.changed)
			}
			after := dataTarget(t, dir)
			if (before != after) != tt.changed {
				t.Fatalf("..data went from %s to %s, changed = %v", before, after, tt.changed)
			}
			if tt.changed {
				assertEntries(t, dir, append(topLevelNames(next), after, dataLink)...)
			}
		})
	}
}

func TestWriteRemovesKeys(t *testing.T) {
	dir, w := newVolume(t)
	mustWrite(t, w, map[string]File{"a": file("A", 0o644), "b": file("B", 0o644), "d/x": file("X", 0o644), "e/y": file("Y", 0o644)})
	old := dataTarget(t, dir)
	mustWrite(t, w, map[string]File{"a": file("A", 0o644), "e/z": file("Z", 0o644)})
	ts := dataTarget(t, dir)
	assertEntries(t, dir, ts, dataLink, "a", "e")
	assertMissing(t, filepath.Join(dir, old))
	assertMissing(t, filepath.Join(dir, ts, "b"))
	assertMissing(t, filepath.Join(dir, "e/y"))
	assertContent(t, dir, "e/z", "Z")
}

func TestWriteUnchangedKeepsDirectory(t *testing.T) {
	dir, w := newVolume(t)
	payload := map[string]File{"a": file("A", 0o644), "d/b": file("B", 0o600)}
	mustWrite(t, w, payload)
	ts := dataTarget(t, dir)
	before := snapshot(t, dir)
	if mustWrite(t, w, payload) {
		t.Fatal("rewriting the same payload reported a change")
	}
	if got := dataTarget(t, dir); got != ts {
		t.Fatalf("..data moved from %s to %s", ts, got)
	}
	assertSameSnapshot(t, before, snapshot(t, dir))
}

func TestWriteRepairsLinks(t *testing.T) {
	dir, w := newVolume(t)
	payload := map[string]File{"a": file("A", 0o644), "b": file("B", 0o644), "d/c": file("C", 0o644)}
	mustWrite(t, w, payload)
	ts := dataTarget(t, dir)
	if err := os.Remove(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/a", filepath.Join(dir, "b")); err != nil { // wrong target
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ts+"/d", filepath.Join(dir, "d")); err != nil { // bypasses ..data
		t.Fatal(err)
	}
	if mustWrite(t, w, payload) {
		t.Fatal("repairing links reported a payload change")
	}
	if got := dataTarget(t, dir); got != ts {
		t.Fatalf("..data moved from %s to %s", ts, got)
	}
	for _, name := range []string{"a", "b", "d"} {
		if got := readLink(t, filepath.Join(dir, name)); got != "..data/"+name {
			t.Errorf("%s -> %q after repair", name, got)
		}
	}
	assertEntries(t, dir, ts, dataLink, "a", "b", "d")
}

func TestWriteEmptyPayload(t *testing.T) {
	dir, w := newVolume(t)
	if !mustWrite(t, w, map[string]File{}) {
		t.Fatal("first empty write reported no change")
	}
	ts := dataTarget(t, dir)
	assertEntries(t, dir, ts, dataLink)
	if got := entries(t, filepath.Join(dir, ts)); len(got) != 0 {
		t.Fatalf("empty payload directory holds %v", got)
	}
	if mustWrite(t, w, nil) {
		t.Fatal("second empty write reported a change")
	}
	mustWrite(t, w, map[string]File{"a": file("A", 0o644)})
	if !mustWrite(t, w, map[string]File{}) {
		t.Fatal("emptying the payload reported no change")
	}
	assertEntries(t, dir, dataTarget(t, dir), dataLink)
}

func TestWriteInvalidPayloadTouchesNothing(t *testing.T) {
	dir, w := newVolume(t)
	mustWrite(t, w, map[string]File{"a": file("A", 0o644)})
	before := snapshot(t, dir)
	bad := []map[string]File{
		{"a": file("new", 0o644), "../escape": file("x", 0o644)},
		{"b": file("new", 0o644), "b/c": file("x", 0o644)},
		{"a": {Data: []byte("x"), Mode: os.ModeSetgid | 0o644}},
	}
	for _, payload := range bad {
		changed, err := w.Write(payload)
		if changed || !errors.Is(err, ErrInvalidPayload) {
			t.Fatalf("Write = %v, %v; want false, ErrInvalidPayload", changed, err)
		}
	}
	assertSameSnapshot(t, before, snapshot(t, dir))
}

func TestWriteRemovesCrashLeftovers(t *testing.T) {
	dir, w := newVolume(t)
	mustWrite(t, w, map[string]File{"a": file("A", 0o644), "gone": file("G", 0o644)})
	stale := filepath.Join(dir, "..2020_01_02_03_04_05.42")
	if err := os.MkdirAll(filepath.Join(stale, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..2020_01_02_03_04_05.42", filepath.Join(dir, dataTmp)); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, w, map[string]File{"a": file("A2", 0o644)})
	assertEntries(t, dir, dataTarget(t, dir), dataLink, "a")
}

// A write that stops (crash, SIGTERM) after switching ..data but before
// cleaning up leaves the previous payload, with its old values, and the links
// of removed keys. The next write of the same payload changes nothing but
// must still finish that clean-up.
func TestWriteUnchangedFinishesCrashedCleanUp(t *testing.T) {
	dir, w := newVolume(t)
	mustWrite(t, w, map[string]File{"kept": file("K", 0o644), "rotated": file("old-s3cr3t", 0o600), "gone/x": file("G", 0o644)})
	old := dataTarget(t, dir)
	payload := map[string]File{"kept": file("K", 0o644), "rotated": file("new-s3cr3t", 0o600), "new": file("N", 0o644)}
	root, err := os.OpenRoot(dir)
	must(t, err)
	defer root.Close()
	current, err := w.writeDataDir(root, payload)
	must(t, err)
	must(t, switchData(root, current))
	// Also a ..data_tmp from a write stopped before its rename, and the
	// directory of a write stopped before its switch.
	must(t, os.Symlink(old, filepath.Join(dir, dataTmp)))
	partial, err := mkdirTimestamped(root)
	must(t, err)

	if mustWrite(t, w, payload) {
		t.Fatal("rewriting the live payload reported a change")
	}
	if got := dataTarget(t, dir); got != current {
		t.Fatalf("..data moved from %s to %s", current, got)
	}
	assertMissing(t, filepath.Join(dir, old))
	assertMissing(t, filepath.Join(dir, partial))
	assertEntries(t, dir, current, dataLink, "kept", "rotated", "new")
	assertContent(t, dir, "rotated", "new-s3cr3t")
	assertContent(t, dir, "new", "N")
}

func TestWriteLeavesForeignEntries(t *testing.T) {
	dir, w := newVolume(t)
	mustWrite(t, w, map[string]File{"a": file("A", 0o644)})
	foreign := map[string]func(string) error{
		"user.txt":                func(p string) error { return os.WriteFile(p, []byte("mine"), 0o644) },
		"userdir":                 func(p string) error { return os.Mkdir(p, 0o755) },
		"..notatimestamp":         func(p string) error { return os.Mkdir(p, 0o755) },
		"..2020_01_02.1":          func(p string) error { return os.Mkdir(p, 0o755) },
		"ulink":                   func(p string) error { return os.Symlink("user.txt", p) },
		"dangling":                func(p string) error { return os.Symlink("..data/other", p) },
		"..2020_01_02_03_04_05.7": func(p string) error { return os.Symlink("userdir", p) },
	}
	for name, mk := range foreign {
		if err := mk(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// The first write changes the payload, the second cleans up again
	// without changing it: neither touches what the writer did not create.
	for _, wantChanged := range []bool{true, false} {
		if got := mustWrite(t, w, map[string]File{"b": file("B", 0o644)}); got != wantChanged {
			t.Fatalf("changed = %v, want %v", got, wantChanged)
		}
		want := []string{dataTarget(t, dir), dataLink, "b"}
		for name := range foreign {
			want = append(want, name)
		}
		assertEntries(t, dir, want...)
		assertContent(t, dir, "user.txt", "mine")
	}
}

func TestWriteCollisionWithForeignEntry(t *testing.T) {
	for _, kind := range []string{"file", "dir"} {
		t.Run(kind, func(t *testing.T) {
			dir, w := newVolume(t)
			mustWrite(t, w, map[string]File{"a": file("A", 0o644)})
			p := filepath.Join(dir, "key1")
			if kind == "file" {
				must(t, os.WriteFile(p, []byte("user data"), 0o600))
			} else {
				must(t, os.MkdirAll(filepath.Join(p, "sub"), 0o755))
			}
			before := snapshot(t, dir)
			changed, err := w.Write(map[string]File{"a": file("A", 0o644), "key1/x": file("s3cr3t", 0o644)})
			if changed || !errors.Is(err, ErrCollision) || !strings.Contains(err.Error(), `"key1"`) {
				t.Fatalf("Write = %v, %v; want false and ErrCollision naming key1", changed, err)
			}
			assertNoSecret(t, err, "s3cr3t")
			t.Logf("error: %v", err)
			assertSameSnapshot(t, before, snapshot(t, dir))
		})
	}
}

func TestWriteCollisionAtDataLink(t *testing.T) {
	dir, w := newVolume(t)
	must(t, os.Mkdir(filepath.Join(dir, dataLink), 0o755))
	_, err := w.Write(map[string]File{"a": file("A", 0o644)})
	if !errors.Is(err, ErrCollision) || !strings.Contains(err.Error(), `"..data"`) {
		t.Fatalf("Write = %v, want ErrCollision naming ..data", err)
	}
	assertEntries(t, dir, dataLink)
}

func TestWriteFailureKeepsOldPayload(t *testing.T) {
	dir, w := newVolume(t)
	mustWrite(t, w, map[string]File{"a": file("old-a", 0o644), "d/b": file("old-b", 0o600)})
	before := snapshot(t, dir)
	injected := errors.New("injected failure")
	w.failWrite = func(p string) error {
		if p == "d/b" {
			return injected
		}
		return nil
	}
	changed, err := w.Write(map[string]File{"a": file("s3cr3t-a", 0o644), "d/b": file("s3cr3t-b", 0o644), "n": file("s3cr3t-n", 0o644)})
	if changed || !errors.Is(err, injected) || !strings.Contains(err.Error(), `"d/b"`) {
		t.Fatalf("Write = %v, %v; want false and the injected error naming d/b", changed, err)
	}
	assertNoSecret(t, err, "s3cr3t")
	t.Logf("error: %v", err)
	assertSameSnapshot(t, before, snapshot(t, dir))
	assertContent(t, dir, "a", "old-a")
	assertContent(t, dir, "d/b", "old-b")

	w.failWrite = nil
	mustWrite(t, w, map[string]File{"a": file("new-a", 0o644)})
	assertContent(t, dir, "a", "new-a")
}

func TestWriteMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "does-not-exist")
	w := New(dir)
	assertMissing(t, dir) // New does no I/O
	if _, err := w.Write(map[string]File{}); err == nil {
		t.Fatal("Write into a missing directory succeeded")
	}
	assertMissing(t, dir)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
