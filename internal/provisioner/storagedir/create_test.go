package storagedir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode()
}

func TestCreateGivesExactModesWhateverTheUmask(t *testing.T) {
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	base := t.TempDir()
	got, err := Create(base, "ns/team/claim", 0o777|os.ModeSticky)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(base, "ns/team/claim"); got != want {
		t.Fatalf("Create = %s, want %s", got, want)
	}
	if m := mode(t, got); m != os.ModeDir|0o777|os.ModeSticky {
		t.Errorf("mode of %s = %v, want drwxrwxrwt", got, m)
	}
	for _, p := range []string{"ns", "ns/team"} {
		if m := mode(t, filepath.Join(base, p)); m != os.ModeDir|0o755 {
			t.Errorf("mode of %s = %v, want drwxr-xr-x", p, m)
		}
	}
}

func TestCreateIsIdempotent(t *testing.T) {
	base := t.TempDir()
	dir, err := Create(base, "ns/claim", 0o770)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "data"))
	// A crash between mkdir and chmod left the wrong mode: a retry fixes it.
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	again, err := Create(base, "ns/claim", 0o770)
	if err != nil || again != dir {
		t.Fatalf("second Create = %q, %v; want %q, nil", again, err, dir)
	}
	if !exists(filepath.Join(dir, "data")) {
		t.Error("second Create lost the directory's content")
	}
	if m := mode(t, dir); m != os.ModeDir|0o770 {
		t.Errorf("mode after retry = %v, want drwxrwx---", m)
	}
}

func TestCreateRefusesSymlinksAndFiles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rel   string
		plant func(t *testing.T, base, outside string)
		want  string
	}{
		{"symlink at the directory", "claim", func(t *testing.T, base, outside string) {
			mustSymlink(t, outside, filepath.Join(base, "claim"))
		}, "symlink"},
		{"symlink at an intermediate component", "ns/claim", func(t *testing.T, base, outside string) {
			mustSymlink(t, outside, filepath.Join(base, "ns"))
		}, "symlink"},
		{"relative symlink at an intermediate component", "ns/sub/claim", func(t *testing.T, base, outside string) {
			mustMkdir(t, filepath.Join(base, "ns"))
			rel, _ := filepath.Rel(filepath.Join(base, "ns"), outside)
			mustSymlink(t, rel, filepath.Join(base, "ns/sub"))
		}, "symlink"},
		{"file at the directory", "ns/claim", func(t *testing.T, base, outside string) {
			mustMkdir(t, filepath.Join(base, "ns"))
			mustWrite(t, filepath.Join(base, "ns/claim"))
		}, "not a directory"},
		{"file at an intermediate component", "ns/claim", func(t *testing.T, base, outside string) {
			mustWrite(t, filepath.Join(base, "ns"))
		}, "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			outside, unchanged := outsideDir(t)
			tc.plant(t, base, outside)
			_, err := Create(base, tc.rel, 0o777)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Create = %v, want an error saying %q", err, tc.want)
			}
			unchanged()
		})
	}
}

func TestCreateRefusesABadBase(t *testing.T) {
	base := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	mustSymlink(t, base, link)
	for _, b := range []string{"relative/base", base + "/", filepath.Join(base, "missing"), link} {
		if _, err := Create(b, "claim", 0o777); err == nil {
			t.Errorf("Create(%q) succeeded, want an error", b)
		}
	}
	if exists(filepath.Join(base, "claim")) {
		t.Error("Create through a symlinked base made the directory")
	}
}

func TestCreateRefusesToCrossAMount(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	mustMkdir(t, filepath.Join(base, "ns"))
	bindMount(t, filepath.Join(base, "ns"))
	_, err := Create(base, "ns/claim", 0o777)
	if err == nil || !strings.Contains(err.Error(), "mount point") {
		t.Fatalf("Create = %v, want an error about a mount point", err)
	}
	if exists(filepath.Join(base, "ns/claim")) {
		t.Error("Create made a directory on another mount")
	}
}
