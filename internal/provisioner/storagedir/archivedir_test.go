package storagedir

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

func TestArchiveIntoMovesToTheArchiveDirectory(t *testing.T) {
	base := t.TempDir()
	for i, want := range []string{"archived-ns-claim-pv", "archived-ns-claim-pv-2"} {
		dir, err := Create(base, "ns/claim", 0o777)
		if err != nil {
			t.Fatal(err)
		}
		mustWrite(t, filepath.Join(dir, want)) // names where it must end up
		got, err := ArchiveInto(base, "ns/claim", AsideRel("ns/claim", "pv"), "ns-claim-pv")
		if err != nil {
			t.Fatalf("archive %d: %v", i, err)
		}
		if got != filepath.Join(base, ArchiveDir, want) || !exists(filepath.Join(got, want)) || exists(dir) {
			t.Fatalf("archive %d = %s; the tree is %v", i, got, tree(t, base))
		}
	}
	if m := mode(t, filepath.Join(base, ArchiveDir)); m != os.ModeDir|archiveDirMode {
		t.Errorf("mode of %s = %v, want drwx------", ArchiveDir, m)
	}
	// Done already: the last archive is found, nothing moves.
	before := tree(t, base)
	got, err := ArchiveInto(base, "ns/claim", AsideRel("ns/claim", "pv"), "ns-claim-pv")
	if err != nil || got != filepath.Join(base, ArchiveDir, "archived-ns-claim-pv-2") {
		t.Fatalf("ArchiveInto again = %q, %v; want the last archive", got, err)
	}
	if after := tree(t, base); !reflect.DeepEqual(after, before) {
		t.Errorf("ArchiveInto of an archived volume changed the tree")
	}
}

func TestArchiveIntoFromAside(t *testing.T) {
	base := t.TempDir()
	aside := AsideRel("ns/claim", "pv")
	mustMkdir(t, filepath.Join(base, aside))
	mustWrite(t, filepath.Join(base, aside, "data"))
	got, err := ArchiveInto(base, "ns/claim", aside, "ns-claim-pv")
	if err != nil || got != filepath.Join(base, ArchiveDir, "archived-ns-claim-pv") || !exists(filepath.Join(got, "data")) || exists(filepath.Join(base, aside)) {
		t.Fatalf("ArchiveInto = %q, %v; the tree is %v", got, err, tree(t, base))
	}
}

// TestArchiveIntoFindsAnOlderVersionsArchive: an agent of an older version
// archived the volume next to it, and was stopped before the PV was gone;
// the retry finds that archive and moves nothing.
func TestArchiveIntoFindsAnOlderVersionsArchive(t *testing.T) {
	base := t.TempDir()
	mustMkdir(t, filepath.Join(base, "ns", "archived-claim"))
	got, err := ArchiveInto(base, "ns/claim", AsideRel("ns/claim", "pv"), "ns-claim-pv")
	if err != nil || got != filepath.Join(base, "ns", "archived-claim") {
		t.Fatalf("ArchiveInto = %q, %v; want the older archive", got, err)
	}
	if exists(filepath.Join(base, ArchiveDir)) {
		t.Errorf("ArchiveInto of nothing made %s", ArchiveDir)
	}
}

func TestArchiveIntoOfNothingIsGone(t *testing.T) {
	base := t.TempDir()
	for _, rel := range []string{"claim", "ns/claim"} {
		if _, err := ArchiveInto(base, rel, AsideRel(rel, "pv"), "x-pv"); !errors.Is(err, ErrGone) {
			t.Errorf("ArchiveInto of missing %s = %v, want ErrGone", rel, err)
		}
	}
	mustMkdir(t, filepath.Join(base, ArchiveDir))
	if _, err := ArchiveInto(base, "claim", AsideRel("claim", "pv"), "x-pv"); !errors.Is(err, ErrGone) {
		t.Errorf("ArchiveInto of missing claim = %v, want ErrGone", err)
	}
}

// TestArchiveIntoNeverThroughASymlink: an archive directory planted as a
// symlink (or a file) is refused; the volume stays where it is.
func TestArchiveIntoNeverThroughASymlink(t *testing.T) {
	base := t.TempDir()
	outside, unchanged := outsideDir(t)
	defer unchanged()
	mustSymlink(t, outside, filepath.Join(base, ArchiveDir))
	dir, err := Create(base, "ns/claim", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "data"))
	if got, err := ArchiveInto(base, "ns/claim", AsideRel("ns/claim", "pv"), "ns-claim-pv"); err == nil {
		t.Fatalf("ArchiveInto through a symlinked %s = %q, want an error", ArchiveDir, got)
	}
	if !exists(filepath.Join(dir, "data")) {
		t.Error("the volume moved")
	}
}

func TestArchiveIntoRefusesBadNames(t *testing.T) {
	base := t.TempDir()
	for _, name := range []string{"", "a/b", "..", "/x"} {
		if _, err := ArchiveInto(base, "claim", AsideRel("claim", "pv"), name); err == nil {
			t.Errorf("ArchiveInto as %q succeeded", name)
		}
	}
}

// TestArchiveIntoWithoutRenameNoReplace: on NFS, which refuses
// RENAME_NOREPLACE, the reservation fallback works from the volume's
// directory into ArchiveDir and overwrites no archive.
func TestArchiveIntoWithoutRenameNoReplace(t *testing.T) {
	withRenameat2(t, func(olddirfd int, oldpath string, newdirfd int, newpath string, flags uint) error {
		if flags&unix.RENAME_NOREPLACE != 0 {
			return unix.EINVAL
		}
		return unix.Renameat2(olddirfd, oldpath, newdirfd, newpath, flags)
	})
	base := t.TempDir()
	mustMkdir(t, filepath.Join(base, ArchiveDir, "archived-ns-claim-pv"))
	mustWrite(t, filepath.Join(base, ArchiveDir, "archived-ns-claim-pv", "earlier"))
	dir, err := Create(base, "ns/claim", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "data"))
	got, err := ArchiveInto(base, "ns/claim", AsideRel("ns/claim", "pv"), "ns-claim-pv")
	if err != nil || got != filepath.Join(base, ArchiveDir, "archived-ns-claim-pv-2") {
		t.Fatalf("ArchiveInto = %q, %v; want archived-ns-claim-pv-2", got, err)
	}
	if !exists(filepath.Join(got, "data")) || !exists(filepath.Join(base, ArchiveDir, "archived-ns-claim-pv", "earlier")) || exists(dir) {
		t.Errorf("after ArchiveInto the tree is %v", tree(t, base))
	}
}
