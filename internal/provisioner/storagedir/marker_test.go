package storagedir

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func marker(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, MarkerName))
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCreateMarkedMarksWhatItMakes(t *testing.T) {
	base := t.TempDir()
	dir, mine, err := CreateMarked(base, "ns/claim", 0o777, "pvc-1")
	if err != nil || !mine {
		t.Fatalf("CreateMarked = %v, %v; want a new directory, marked", mine, err)
	}
	if got := marker(t, dir); got != "pvc-1\n" {
		t.Errorf("marker holds %q, want pvc-1", got)
	}
	if m := mode(t, dir); m != os.ModeDir|0o777 {
		t.Errorf("mode %v, want drwxrwxrwx", m)
	}
	if marker(t, filepath.Join(base, "ns")) != "" {
		t.Error("a parent directory got a marker")
	}
	// A retry after a crash finds its own marker.
	again, mine, err := CreateMarked(base, "ns/claim", 0o777, "pvc-1")
	if err != nil || !mine || again != dir {
		t.Fatalf("second CreateMarked = %s, %v, %v; want %s, mine", again, mine, err, dir)
	}
}

func TestCreateMarkedReusesAnUnmarkedDirectory(t *testing.T) {
	base := t.TempDir()
	mustMkdir(t, filepath.Join(base, "shared"))
	mustWrite(t, filepath.Join(base, "shared", "data"))
	dir, mine, err := CreateMarked(base, "shared", 0o777, "pvc-1")
	if err != nil || mine {
		t.Fatalf("CreateMarked = %v, %v; want the directory reused, not marked", mine, err)
	}
	if marker(t, dir) != "" || !exists(filepath.Join(dir, "data")) {
		t.Errorf("the reused directory holds %v", tree(t, dir))
	}
}

func TestCreateMarkedWithoutOwnerWritesNoMarker(t *testing.T) {
	base := t.TempDir()
	dir, mine, err := CreateMarked(base, "claim", 0o777, "")
	if err != nil || mine || marker(t, dir) != "" {
		t.Fatalf("CreateMarked without owner = %v, %v, marker %q", mine, err, marker(t, dir))
	}
}

func TestCreateMarkedRefusesAnotherOwnersDirectory(t *testing.T) {
	for _, tc := range []struct{ name, rel, want string }{
		{"the same directory", "ns/claim", "refusing to share it"},
		{"a directory inside it", "ns/claim/sub", "refusing to make a directory inside it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir, _, err := CreateMarked(base, "ns/claim", 0o750, "pvc-1")
			if err != nil {
				t.Fatal(err)
			}
			before := tree(t, base)
			for _, owner := range []string{"pvc-2", ""} {
				_, mine, err := CreateMarked(base, tc.rel, 0o777, owner)
				if err == nil || mine || !strings.Contains(err.Error(), "pvc-1") || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("CreateMarked by %q = %v, %v; want an error naming pvc-1 and saying %q", owner, mine, err, tc.want)
				}
			}
			after := tree(t, base)
			if len(after) != len(before) || after[dir] != before[dir] {
				t.Errorf("a refused CreateMarked changed %v to %v", before, after)
			}
		})
	}
}

func TestMarkersThatAreNotFiles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, path string)
		want  string
	}{
		{"a symlink", func(t *testing.T, path string) { mustSymlink(t, "/etc/hostname", path) }, "symlink"},
		{"a FIFO", func(t *testing.T, path string) {
			if err := unix.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			mustMkdir(t, filepath.Join(base, "claim"))
			tc.plant(t, filepath.Join(base, "claim", MarkerName))
			if _, _, err := CreateMarked(base, "claim", 0o777, "pvc-1"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CreateMarked = %v, want an error saying %q", err, tc.want)
			}
			if got, err := RemoveMarked(base, "claim", "pvc-1"); err == nil || got == Removed {
				t.Errorf("RemoveMarked = %v, %v; want an error", got, err)
			}
			if err := Unmark(base, "claim", "pvc-1"); err == nil {
				t.Error("Unmark succeeded")
			}
			if !exists(filepath.Join(base, "claim", MarkerName)) {
				t.Error("the planted marker is gone")
			}
		})
	}
}

func TestUnmark(t *testing.T) {
	base := t.TempDir()
	mine, _, err := CreateMarked(base, "mine", 0o777, "pvc-1")
	if err != nil {
		t.Fatal(err)
	}
	theirs, _, err := CreateMarked(base, "theirs", 0o777, "pvc-2")
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(base, "cut") // a crash cut the marker's writing short
	mustMkdir(t, cut)
	if err := os.WriteFile(filepath.Join(cut, MarkerName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"mine", "theirs", "cut", "missing", "missing/below"} {
		if err := Unmark(base, rel, "pvc-1"); err != nil {
			t.Errorf("Unmark(%s) = %v", rel, err)
		}
	}
	if exists(filepath.Join(mine, MarkerName)) || exists(filepath.Join(cut, MarkerName)) {
		t.Error("Unmark left the owner's or an empty marker")
	}
	if marker(t, theirs) != "pvc-2\n" {
		t.Error("Unmark removed another owner's marker")
	}
	if !exists(mine) {
		t.Error("Unmark removed the directory")
	}
}

func TestRemoveMarked(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, base string)
		want Outcome
		left []string // paths below base that must remain
	}{
		{"made for the owner, empty", func(t *testing.T, base string) {
			if _, _, err := CreateMarked(base, "ns/claim", 0o777, "pvc-1"); err != nil {
				t.Fatal(err)
			}
		}, Removed, []string{"ns"}},
		{"made for the owner, written to since", func(t *testing.T, base string) {
			dir, _, err := CreateMarked(base, "ns/claim", 0o777, "pvc-1")
			if err != nil {
				t.Fatal(err)
			}
			mustWrite(t, filepath.Join(dir, "data"))
		}, KeptNotEmpty, []string{"ns/claim/data"}},
		{"there before, with data", func(t *testing.T, base string) {
			mustMkdir(t, filepath.Join(base, "ns/claim"))
			mustWrite(t, filepath.Join(base, "ns/claim/data"))
			if _, _, err := CreateMarked(base, "ns/claim", 0o777, "pvc-1"); err != nil {
				t.Fatal(err)
			}
		}, KeptNotMade, []string{"ns/claim/data"}},
		{"there before, empty", func(t *testing.T, base string) {
			mustMkdir(t, filepath.Join(base, "ns/claim"))
		}, KeptNotMade, []string{"ns/claim"}},
		{"made for another owner", func(t *testing.T, base string) {
			if _, _, err := CreateMarked(base, "ns/claim", 0o777, "pvc-2"); err != nil {
				t.Fatal(err)
			}
		}, KeptNotMade, []string{"ns/claim/" + MarkerName}},
		{"missing", func(t *testing.T, base string) {}, AlreadyGone, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			tc.make(t, base)
			got, err := RemoveMarked(base, "ns/claim", "pvc-1")
			if err != nil || got != tc.want {
				t.Fatalf("RemoveMarked = %v, %v; want %v", got, err, tc.want)
			}
			for _, p := range tc.left {
				if !exists(filepath.Join(base, p)) {
					t.Errorf("%s is gone", p)
				}
			}
			if tc.want == Removed && exists(filepath.Join(base, "ns/claim")) {
				t.Error("the directory is still there")
			}
			if tc.want == KeptNotEmpty && exists(filepath.Join(base, "ns/claim", MarkerName)) {
				t.Error("a kept directory still carries the owner's marker")
			}
		})
	}
}

func TestRemoveMarkedRefusesSymlinks(t *testing.T) {
	base := t.TempDir()
	outside := t.TempDir()
	if _, _, err := CreateMarked(outside, "claim", 0o777, "pvc-1"); err != nil {
		t.Fatal(err)
	}
	before := tree(t, outside)
	mustSymlink(t, filepath.Join(outside, "claim"), filepath.Join(base, "claim"))
	mustSymlink(t, outside, filepath.Join(base, "ns"))
	for _, rel := range []string{"claim", "ns/claim"} {
		if got, err := RemoveMarked(base, rel, "pvc-1"); err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("RemoveMarked(%s) = %v, %v; want an error about a symlink", rel, got, err)
		}
	}
	if after := tree(t, outside); len(after) != len(before) {
		t.Errorf("RemoveMarked through a symlink changed %v to %v", before, after)
	}
}

// TestCreateMarkedEmpty: a directory that is there already is taken only
// when it is the owner's, or holds nothing anybody could read.
func TestCreateMarkedEmpty(t *testing.T) {
	for _, tc := range []struct {
		name    string
		before  func(t *testing.T, dir string) // dir is base/ns/claim
		mine    bool
		wantErr string // "" for taken
	}{
		{name: "missing: made and marked", mine: true},
		{name: "empty, unmarked", before: func(t *testing.T, dir string) { mustMkdir(t, dir) }},
		{name: "a marker naming no one alone", before: func(t *testing.T, dir string) {
			mustMkdir(t, dir)
			mustWrite(t, filepath.Join(dir, MarkerName))
			if err := os.Truncate(filepath.Join(dir, MarkerName), 0); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "the owner's, with data", mine: true, before: func(t *testing.T, dir string) {
			mustMkdir(t, dir)
			if err := os.WriteFile(filepath.Join(dir, MarkerName), []byte("pvc-1\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			mustWrite(t, filepath.Join(dir, "data"))
		}},
		{name: "a file", before: func(t *testing.T, dir string) {
			mustMkdir(t, dir)
			mustWrite(t, filepath.Join(dir, "data"))
		}, wantErr: `holds "data"`},
		{name: "an archive of an older version", before: func(t *testing.T, dir string) {
			mustMkdir(t, filepath.Join(dir, "archived-db"))
			mustWrite(t, filepath.Join(dir, "archived-db", "secret"))
		}, wantErr: `holds "archived-db"`},
		{name: "a volume moved aside", before: func(t *testing.T, dir string) {
			mustMkdir(t, filepath.Join(dir, AsidePrefix+"pvc-2"))
		}, wantErr: `holds "` + AsidePrefix + `pvc-2"`},
		{name: "a dot-file", before: func(t *testing.T, dir string) {
			mustMkdir(t, dir)
			mustWrite(t, filepath.Join(dir, ".hidden"))
		}, wantErr: `holds ".hidden"`},
		{name: "a marker naming no one and a file", before: func(t *testing.T, dir string) {
			mustMkdir(t, dir)
			if err := os.WriteFile(filepath.Join(dir, MarkerName), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			mustWrite(t, filepath.Join(dir, "data"))
		}, wantErr: `holds "data"`},
		{name: "another volume's marker", before: func(t *testing.T, dir string) {
			mustMkdir(t, dir)
			if err := os.WriteFile(filepath.Join(dir, MarkerName), []byte("pvc-2\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "being provisioned for pvc-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "ns", "claim")
			if tc.before != nil {
				tc.before(t, dir)
			}
			before := tree(t, base)
			got, mine, err := CreateMarkedEmpty(base, "ns/claim", 0o777, "pvc-1")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), dir) {
					t.Fatalf("CreateMarkedEmpty = %v, want an error naming %s and saying %q", err, dir, tc.wantErr)
				}
				if strings.HasPrefix(tc.wantErr, "holds") && !errors.Is(err, ErrNotEmpty) {
					t.Errorf("error %v does not wrap ErrNotEmpty", err)
				}
				if after := tree(t, base); !reflect.DeepEqual(after, before) {
					t.Errorf("a refusal changed the tree: %v, was %v", after, before)
				}
				return
			}
			if err != nil || got != dir || mine != tc.mine {
				t.Fatalf("CreateMarkedEmpty = %q, %v, %v; want %s, mine %v", got, mine, err, dir, tc.mine)
			}
		})
	}
}
