package storagedir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/mount"
)

func TestMoveRenamesAndNeverReplaces(t *testing.T) {
	base := t.TempDir()
	dir, err := Create(base, "ns/vol", 0o777)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "f"))
	if err := Move(base, "ns/vol", "ns/.aside"); err != nil {
		t.Fatal(err)
	}
	if exists(dir) || !exists(filepath.Join(base, "ns/.aside/f")) {
		t.Fatal("the directory was not moved with its content")
	}
	if err := Move(base, "ns/vol", "ns/.aside"); !errors.Is(err, unix.ENOENT) {
		t.Errorf("Move of a missing directory = %v, want ENOENT", err)
	}
	mustMkdir(t, dir)
	if err := Move(base, "ns/vol", "ns/.aside"); !errors.Is(err, unix.EEXIST) {
		t.Errorf("Move onto an existing (empty) directory = %v, want EEXIST", err)
	}
	if !exists(filepath.Join(base, "ns/.aside/f")) {
		t.Error("Move replaced the directory it was refused")
	}
}

func TestMoveRefuses(t *testing.T) {
	base := t.TempDir()
	outside, unchanged := outsideDir(t)
	mustSymlink(t, outside, filepath.Join(base, "link"))
	mustWrite(t, filepath.Join(base, "file"))
	mustMkdir(t, filepath.Join(base, "a"))
	for _, tc := range []struct{ from, to, want string }{
		{"link", "moved", "symlink"},
		{"file", "moved", "not a directory"},
		{"link/x", "link/y", "symlink"},
		{"a", "b/a", "same parent"},
		{"../x", "y", ".."},
	} {
		err := Move(base, tc.from, tc.to)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Move(%s, %s) = %v, want an error saying %q", tc.from, tc.to, err, tc.want)
		}
	}
	unchanged()
	if _, err := os.Lstat(filepath.Join(base, "link")); err != nil {
		t.Errorf("the symlink: %v", err)
	}
}

func TestExists(t *testing.T) {
	base := t.TempDir()
	mustMkdir(t, filepath.Join(base, "d"))
	mustWrite(t, filepath.Join(base, "f"))
	outside, _ := outsideDir(t)
	mustSymlink(t, outside, filepath.Join(base, "l"))
	for rel, want := range map[string]bool{"d": true, "missing": false, "missing/below": false} {
		if got, err := Exists(base, rel); err != nil || got != want {
			t.Errorf("Exists(%s) = %v, %v; want %v", rel, got, err, want)
		}
	}
	for _, rel := range []string{"f", "l", "l/x"} {
		if _, err := Exists(base, rel); err == nil {
			t.Errorf("Exists(%s) succeeded, want an error", rel)
		}
	}
	if _, err := Exists(filepath.Join(base, "no-base"), "d"); err == nil {
		t.Error("Exists below a missing base succeeded: a disk not mounted is not an empty one")
	}
}

func TestArchiveAsNamesTheArchiveAfterTheVolume(t *testing.T) {
	base := t.TempDir()
	mustMkdir(t, filepath.Join(base, ".aside"))
	mustWrite(t, filepath.Join(base, ".aside/f"))
	mustMkdir(t, filepath.Join(base, "archived-vol")) // an older archive stays
	for i := range 2 {                                // the second finds what the first made
		got, err := ArchiveAs(base, ".aside", "vol")
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if want := filepath.Join(base, "archived-vol-2"); got != want {
			t.Fatalf("call %d: archived to %s, want %s", i, got, want)
		}
	}
	if !exists(filepath.Join(base, "archived-vol-2/f")) {
		t.Error("the archive lost its content")
	}
	if _, err := ArchiveAs(base, ".aside", "a/b"); err == nil {
		t.Error("ArchiveAs with a path for a name succeeded")
	}
}

func TestMoveAsideAndRestore(t *testing.T) {
	base := t.TempDir()
	rel := "ns/vol-pvc-1"
	aside := AsideRel(rel, "pvc-1")
	if aside != "ns/.pending-delete-pvc-1" {
		t.Fatalf("AsideRel = %s", aside)
	}
	dir, err := Create(base, rel, 0o777)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "f"))
	for i := range 2 { // the second finds it done
		if err := MoveAside(base, rel, aside); err != nil {
			t.Fatalf("MoveAside %d: %v", i, err)
		}
	}
	if exists(dir) || !exists(filepath.Join(base, aside, "f")) {
		t.Fatal("not moved aside")
	}
	for i := range 2 {
		if err := Restore(base, rel, aside); err != nil {
			t.Fatalf("Restore %d: %v", i, err)
		}
	}
	if !exists(filepath.Join(dir, "f")) || exists(filepath.Join(base, aside)) {
		t.Fatal("not restored")
	}
	mustMkdir(t, filepath.Join(base, aside))
	if err := MoveAside(base, rel, aside); err == nil || !strings.Contains(err.Error(), "both exist") {
		t.Errorf("MoveAside with both there = %v, want a refusal", err)
	}
	if err := Restore(base, rel, aside); err == nil || !strings.Contains(err.Error(), "both exist") {
		t.Errorf("Restore with both there = %v, want a refusal", err)
	}
	if err := MoveAside(base, "ns/other", AsideRel("ns/other", "pvc-2")); !errors.Is(err, ErrGone) {
		t.Errorf("MoveAside of nothing = %v, want ErrGone", err)
	}
	if err := MoveAside(filepath.Join(base, "unmounted"), rel, aside); err == nil || errors.Is(err, ErrGone) {
		t.Errorf("MoveAside below a missing base = %v, want an error other than ErrGone", err)
	}
}

func TestNotMounted(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	mustMkdir(t, filepath.Join(base, "vol/sub"))
	if err := NotMounted(t.Context(), mount.System{}, base, "vol", ".aside-missing"); err != nil {
		t.Fatalf("NotMounted of an unmounted tree = %v", err)
	}
	target := filepath.Join(t.TempDir(), "pod")
	mustMkdir(t, target)
	if err := unix.Mount(filepath.Join(base, "vol/sub"), target, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	err := NotMounted(t.Context(), mount.System{}, base, ".aside-missing", "vol")
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), target) {
		t.Errorf("NotMounted with a bind mount of a subdirectory = %v, want ErrInUse naming %s", err, target)
	}
	if err := unix.Unmount(target, 0); err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(base, "vol/sub")
	if err := unix.Mount(t.TempDir(), inside, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(inside, unix.MNT_DETACH) })
	if err := NotMounted(t.Context(), mount.System{}, base, "vol"); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), inside) {
		t.Errorf("NotMounted with a mount inside = %v, want ErrInUse naming %s", err, inside)
	}
}
