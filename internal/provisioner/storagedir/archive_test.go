package storagedir

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestArchiveRenamesWithoutOverwriting(t *testing.T) {
	base := t.TempDir()
	for i, want := range []string{"archived-claim", "archived-claim-2", "archived-claim-3"} {
		dir, err := Create(base, "ns/claim", 0o777)
		if err != nil {
			t.Fatal(err)
		}
		mustWrite(t, filepath.Join(dir, want)) // a marker naming where it must end up
		got, err := Archive(base, "ns/claim")
		if err != nil {
			t.Fatalf("archive %d: %v", i, err)
		}
		if got != filepath.Join(base, "ns", want) {
			t.Fatalf("archive %d = %s, want ns/%s", i, got, want)
		}
		if exists(dir) {
			t.Fatalf("archive %d left %s", i, dir)
		}
		for _, earlier := range []string{"archived-claim", "archived-claim-2", "archived-claim-3"}[:i+1] {
			if !exists(filepath.Join(base, "ns", earlier, earlier)) {
				t.Fatalf("after archive %d, %s does not hold its own marker", i, earlier)
			}
		}
	}
}

// TestArchiveOfALongName: a directory whose name leaves no room for
// "archived-" (a long namespace and claim name, and the PV's) is archived
// under its name less bytes from its front, twice without overwriting,
// and found again; it is not refused with ENAMETOOLONG at every retry.
func TestArchiveOfALongName(t *testing.T) {
	base := t.TempDir()
	name := strings.Repeat("n", 60) + "-" + strings.Repeat("c", 150) + "-pvc-0c0e2b37-7f4a-4a8e-9a37-1d3f5c6b7a89"
	for i, suffix := range []string{"", "-2"} {
		dir, err := Create(base, "ns/"+name, 0o777)
		if err != nil {
			t.Fatal(err)
		}
		mustWrite(t, filepath.Join(dir, "data"))
		got, err := Archive(base, "ns/"+name)
		if err != nil {
			t.Fatalf("archive %d: %v", i, err)
		}
		a := filepath.Base(got)
		if len(a) > 255 || !strings.HasPrefix(a, ArchivePrefix) || !strings.HasSuffix(a, "-pvc-0c0e2b37-7f4a-4a8e-9a37-1d3f5c6b7a89"+suffix) {
			t.Fatalf("archive %d named %s (%d bytes), want archived-…<pv>%s of at most 255 bytes", i, a, len(a), suffix)
		}
		if !exists(filepath.Join(got, "data")) {
			t.Fatalf("archive %d: %s does not hold the data", i, got)
		}
		// Archiving what is gone again finds the last archive.
		if again, err := Archive(base, "ns/"+name); err != nil || again != got {
			t.Fatalf("archive %d again = %s, %v; want %s", i, again, err, got)
		}
	}
}

func TestArchiveIsIdempotent(t *testing.T) {
	base := t.TempDir()
	mustMkdir(t, filepath.Join(base, "archived-claim"))
	if _, err := Create(base, "claim", 0o777); err != nil {
		t.Fatal(err)
	}
	first, err := Archive(base, "claim")
	if err != nil {
		t.Fatal(err)
	}
	again, err := Archive(base, "claim")
	if err != nil || again != first {
		t.Fatalf("second Archive = %q, %v; want %q, nil", again, err, first)
	}
	if want := filepath.Join(base, "archived-claim-2"); first != want {
		t.Fatalf("Archive = %s, want %s", first, want)
	}
}

func TestArchiveOfNothingIsGone(t *testing.T) {
	base := t.TempDir()
	for _, rel := range []string{"claim", "ns/claim"} {
		if _, err := Archive(base, rel); !errors.Is(err, ErrGone) {
			t.Errorf("Archive(%s) = %v, want ErrGone", rel, err)
		}
	}
	// A missing base may be a disk that is not mounted: not "gone".
	_, err := Archive(filepath.Join(base, "missing"), "claim")
	if err == nil || errors.Is(err, ErrGone) {
		t.Errorf("Archive in a missing base = %v, want an error other than ErrGone", err)
	}
}

func TestArchiveRefusesSymlinks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rel   string
		plant func(t *testing.T, base, outside string)
	}{
		{"at the directory", "claim", func(t *testing.T, base, outside string) {
			mustSymlink(t, outside, filepath.Join(base, "claim"))
		}},
		{"at an intermediate component", "ns/claim", func(t *testing.T, base, outside string) {
			mustMkdir(t, filepath.Join(outside, "claim"))
			mustSymlink(t, outside, filepath.Join(base, "ns"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			outside, _ := outsideDir(t)
			tc.plant(t, base, outside)
			before, beforeOutside := tree(t, base), tree(t, outside)
			_, err := Archive(base, tc.rel)
			if err == nil || !strings.Contains(err.Error(), "symlink") {
				t.Fatalf("Archive = %v, want an error about a symlink", err)
			}
			if len(tree(t, base)) != len(before) || len(tree(t, outside)) != len(beforeOutside) {
				t.Error("Archive renamed something although it failed")
			}
		})
	}
}

// The fallback for file systems without RENAME_NOREPLACE (NFS).
func TestRenameOverReservation(t *testing.T) {
	base := t.TempDir()
	mustMkdir(t, filepath.Join(base, "old"))
	mustWrite(t, filepath.Join(base, "old/data"))
	mustMkdir(t, filepath.Join(base, "taken"))
	mustWrite(t, filepath.Join(base, "taken/data"))
	fd, err := openBase(base)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := renameOverReservation(fd, "old", fd, "taken"); !errors.Is(err, unix.EEXIST) {
		t.Fatalf("rename onto an existing directory = %v, want EEXIST", err)
	}
	if err := renameOverReservation(fd, "old", fd, "new"); err != nil {
		t.Fatal(err)
	}
	if !exists(filepath.Join(base, "new/data")) || exists(filepath.Join(base, "old")) || !exists(filepath.Join(base, "taken/data")) {
		t.Errorf("after the renames the tree is %v", tree(t, base))
	}
	// A failed rename leaves no reservation behind.
	if err := renameOverReservation(fd, "missing", fd, "reserved"); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("rename of a missing directory = %v, want ENOENT", err)
	}
	if exists(filepath.Join(base, "reserved")) {
		t.Error("the reservation of a failed rename is left behind")
	}
}

// TestArchiveWithoutRenameNoReplace archives on file systems that refuse
// RENAME_NOREPLACE: NFS answers EINVAL, some FUSE file systems EOPNOTSUPP,
// a kernel without renameat2 ENOSYS.
// All get the reservation fallback, which never overwrites an archive.
func TestArchiveWithoutRenameNoReplace(t *testing.T) {
	for _, refusal := range []unix.Errno{unix.EINVAL, unix.EOPNOTSUPP, unix.ENOSYS} {
		t.Run(refusal.Error(), func(t *testing.T) {
			withRenameat2(t, func(olddirfd int, oldpath string, newdirfd int, newpath string, flags uint) error {
				if flags&unix.RENAME_NOREPLACE != 0 {
					return refusal
				}
				return unix.Renameat2(olddirfd, oldpath, newdirfd, newpath, flags)
			})
			base := t.TempDir()
			mustMkdir(t, filepath.Join(base, "archived-claim"))
			mustWrite(t, filepath.Join(base, "archived-claim", "earlier"))
			dir, err := Create(base, "claim", 0o777)
			if err != nil {
				t.Fatal(err)
			}
			mustWrite(t, filepath.Join(dir, "data"))
			got, err := Archive(base, "claim")
			if err != nil {
				t.Fatalf("Archive = %v, want the fallback to rename", err)
			}
			if want := filepath.Join(base, "archived-claim-2"); got != want {
				t.Errorf("Archive = %s, want %s", got, want)
			}
			if !exists(filepath.Join(base, "archived-claim-2", "data")) || !exists(filepath.Join(base, "archived-claim", "earlier")) || exists(dir) {
				t.Errorf("after Archive the tree is %v", tree(t, base))
			}
		})
	}
}

// withRenameat2 makes renameNoReplace call f until the test ends.
func withRenameat2(t *testing.T, f func(int, string, int, string, uint) error) {
	t.Helper()
	saved := renameat2
	renameat2 = f
	t.Cleanup(func() { renameat2 = saved })
}
