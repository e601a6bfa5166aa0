package capacity

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

func zapNop() *zap.Logger { return zap.NewNop() }

func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"pvc-1234", true},
		{"ns-claim-pvc-1", true},
		{"a.b", true},
		{"", false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"../x", false},
		{".capacity", false},
		{"x.img", false},
		{"nul\x00", false},
		{strings.Repeat("a", maxName), true},
		{strings.Repeat("a", maxName+1), false},
	} {
		if err := validName(tc.name); (err == nil) != tc.ok {
			t.Errorf("validName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestCheckArgsRoundsSizes(t *testing.T) {
	for _, tc := range []struct {
		size, want int64
		ok         bool
	}{
		{1, 4096, true},
		{4096, 4096, true},
		{10 << 20, 10 << 20, true},
		{10<<20 + 1, 10<<20 + 4096, true},
		{0, 0, false},
		{-1, 0, false},
	} {
		got, err := checkArgs("v", tc.size)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("checkArgs(%d) = %d, %v; want %d, ok %v", tc.size, got, err, tc.want, tc.ok)
		}
	}
}

func TestJournal(t *testing.T) {
	j := journal{dir: t.TempDir()}
	if _, err := j.load("v"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("load missing: %v", err)
	}
	r := &record{Name: "v", Backend: "btrfs", State: deleting, Size: 8192, ID: 7, Nested: []uint64{8, 9}}
	if err := j.save(r); err != nil {
		t.Fatal(err)
	}
	got, err := j.load("v")
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("load = %+v, %v; want %+v", got, err, r)
	}
	// A crash between writing the temporary file and the rename.
	if err := os.WriteFile(filepath.Join(j.dir, ".w.tmp"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	names, err := j.names()
	if err != nil || len(names) != 1 || names[0] != "v" {
		t.Fatalf("names = %v, %v", names, err)
	}
	if _, err := os.Stat(filepath.Join(j.dir, ".w.tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left: %v", err)
	}
	if err := os.WriteFile(j.path("x"), []byte(`{"name":"y"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := j.load("x"); err == nil {
		t.Error("a record naming another volume was accepted")
	}
	for range 2 {
		if err := j.remove("v"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenRefusesBadRoot(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{"", file, filepath.Join(file, "missing")} {
		if _, err := Open(t.Context(), Config{Root: root, Logger: zapNop()}); err == nil {
			t.Errorf("Open(%q): no error", root)
		}
	}
}

// TestRefusesBadNamesBeforeActing: a name that is not one plain path
// element is refused by every method, and nothing is made.
func TestRefusesBadNamesBeforeActing(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := Open(t.Context(), Config{Root: root, Logger: zapNop()})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"../escape", "a/b", "..", ".capacity", "x.img", ""} {
		if _, err := b.Create(t.Context(), name, 4096); err == nil {
			t.Errorf("Create(%q): no error", name)
		}
		if err := b.Expand(t.Context(), name, 8192); err == nil {
			t.Errorf("Expand(%q): no error", name)
		}
		if _, err := b.Usage(t.Context(), name); err == nil {
			t.Errorf("Usage(%q): no error", name)
		}
		if err := b.Delete(t.Context(), name); err == nil {
			t.Errorf("Delete(%q): no error", name)
		}
		s := b.(Snapshotter)
		if _, err := s.Snapshot(t.Context(), "vol", name); err == nil {
			t.Errorf("Snapshot(vol, %q): no error", name)
		}
		if _, err := s.Snapshot(t.Context(), name, "snap"); err == nil {
			t.Errorf("Snapshot(%q, snap): no error", name)
		}
		if err := s.DeleteSnapshot(t.Context(), name); err == nil {
			t.Errorf("DeleteSnapshot(%q): no error", name)
		}
		if _, err := s.SnapshotInfo(t.Context(), name); err == nil {
			t.Errorf("SnapshotInfo(%q): no error", name)
		}
		for _, src := range []Source{{Snapshot: name}, {Volume: name}} {
			if _, err := s.CreateFrom(t.Context(), "vol", 4096, src); err == nil {
				t.Errorf("CreateFrom(vol, %+v): no error", src)
			}
			if _, err := s.CreateFrom(t.Context(), name, 4096, Source{Snapshot: "snap"}); err == nil {
				t.Errorf("CreateFrom(%q): no error", name)
			}
		}
	}
	if _, err := b.(Snapshotter).CreateFrom(t.Context(), "vol", 4096, Source{Snapshot: "snap", Volume: "other"}); err == nil {
		t.Error("CreateFrom of a snapshot and a volume at once: no error")
	}
	if _, err := b.(Snapshotter).CreateFrom(t.Context(), "vol", 4096, Source{Volume: "vol"}); err == nil {
		t.Error("CreateFrom of a volume from itself: no error")
	}
	for _, dir := range []string{parent, root} {
		des, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, de := range des {
			if de.Name() != "root" && de.Name() != ".capacity" && de.Name() != ".snapshots" {
				t.Errorf("%s was made in %s", de.Name(), dir)
			}
		}
	}
}

// TestRunnerDeadline: a tool that does not finish is given up on at the
// runner's deadline; a failing tool's exit status and message are kept.
func TestRunnerDeadline(t *testing.T) {
	r := runner{timeout: 200 * time.Millisecond}
	start := time.Now()
	_, err := r.run(t.Context(), "sleep", "10")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("sleep 10: %v, want the deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("gave up after %v", d)
	}
	_, err = r.run(t.Context(), "sh", "-c", "echo oops >&2; exit 3")
	var te *toolError
	if !errors.As(err, &te) || te.code != 3 || te.stderr != "oops" {
		t.Errorf("failing tool: %#v", err)
	}
}

// TestOpenRefusesSnapshotsSymlink: the snapshots' directory under the root
// is the agent's own: a symlink in its place (to anywhere) is refused at
// Open, and nothing is made through it.
func TestOpenRefusesSnapshotsSymlink(t *testing.T) {
	root, elsewhere := t.TempDir(), t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(root, ".snapshots")); err != nil {
		t.Fatal(err)
	}
	_, err := Open(t.Context(), Config{Root: root, Logger: zapNop()})
	if err == nil || !strings.Contains(err.Error(), ".snapshots") {
		t.Fatalf("Open with .snapshots a symlink: %v, want an error naming it", err)
	}
	if des, err := os.ReadDir(elsewhere); err != nil || len(des) != 0 {
		t.Fatalf("the symlink's target: %v, %v; want it untouched", des, err)
	}
}
