package mount

import (
	"context"
	"maps"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// bindWith bind-mounts src on target with opts (bind, and ro or not) until
// the test ends.
func bindWith(t *testing.T, src, target string, opts ...string) {
	t.Helper()
	if err := mountByCall(Mount{Type: "none", Source: src, Options: append([]string{"bind"}, opts...)}, target); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
}

// TestReadOnlyMounts: each mount point's own ro flag, for the mount a
// lookup reaches (the topmost of a stack), found by mount ID: a mount the
// table still lists on a path that now leads elsewhere (its parent
// directory mounted over) does not count, nor does a plain directory or a
// missing one.
func TestReadOnlyMounts(t *testing.T) {
	needRoot(t)
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(base, "src")
	mustMkdir(t, src)
	path := func(name string) string { return filepath.Join(base, name) }
	for _, name := range []string{"rw", "ro", "ro-over-rw", "rw-over-ro", "plain", "hidden"} {
		mustMkdir(t, path(name))
	}
	bindWith(t, src, path("rw"))
	bindWith(t, src, path("ro"), "ro")
	bindWith(t, src, path("ro-over-rw"))
	bindWith(t, src, path("ro-over-rw"), "ro")
	bindWith(t, src, path("rw-over-ro"), "ro")
	bindWith(t, src, path("rw-over-ro"))
	// hidden/vol is a read-only mount, then hidden is mounted over: the
	// table still lists the mount on hidden/vol, which a lookup of that
	// path no longer reaches (it finds the plain directory vol of the
	// mount over hidden).
	mustMkdir(t, filepath.Join(path("hidden"), "vol"))
	bindWith(t, src, filepath.Join(path("hidden"), "vol"), "ro")
	over := path("over")
	mustMkdir(t, filepath.Join(over, "vol"))
	bindWith(t, over, path("hidden"))

	dirs := []string{path("rw"), path("ro"), path("ro-over-rw"), path("rw-over-ro"), path("plain"), path("missing"), filepath.Join(path("hidden"), "vol")}
	got, err := ReadOnlyMounts(context.Background(), dirs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{path("rw"): false, path("ro"): true, path("ro-over-rw"): true, path("rw-over-ro"): false}
	if !maps.Equal(got, want) {
		t.Errorf("ReadOnlyMounts = %v, want %v", got, want)
	}
}

func TestReadOnlyMountsOfNothing(t *testing.T) {
	got, err := ReadOnlyMounts(context.Background(), nil)
	if err != nil || len(got) != 0 {
		t.Errorf("ReadOnlyMounts(nil) = %v, %v; want nothing", got, err)
	}
}
