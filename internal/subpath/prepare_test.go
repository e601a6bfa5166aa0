package subpath

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/subpath/subpathtest"
)

const uid = types.UID("pod-1")

// setup returns a Preparer whose root is reached through a symlink, as
// a symlinked /var/lib would be, that opens subPaths in checker processes
// as the agent's does, and a volume directory, with the
// preparer's mounts taken off at the end whatever happens.
func setup(t *testing.T) (Preparer, string) {
	t.Helper()
	plugintest.NeedRoot(t, "makes bind mounts")
	base := t.TempDir()
	mkdir(t, filepath.Join(base, "real"))
	if err := os.Symlink("real", filepath.Join(base, "root")); err != nil {
		t.Fatal(err)
	}
	p := Preparer{Root: layout.Root(filepath.Join(base, "root")), Mounter: mount.System{}, Opener: &Opener{Files: checkerPool(t)}}
	vol := filepath.Join(base, "volume")
	mkdir(t, vol)
	if err := os.Chmod(vol, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.RemovePod(context.Background(), uid); err != nil {
			t.Errorf("RemovePod: %v", err)
		}
	})
	return p, vol
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// mountID is the mount ID of what path shows.
func mountID(t *testing.T, path string) uint64 {
	t.Helper()
	_, mnt, _, err := idOf(unix.AT_FDCWD, path)
	if err != nil {
		t.Fatal(err)
	}
	return mnt
}

func TestPrepareMountsKeepsAndRemoves(t *testing.T) {
	p, vol := setup(t)
	plugintest.WriteFile(t, filepath.Join(vol, "a/b/file"), "in a/b")
	plugintest.WriteFile(t, filepath.Join(vol, "single"), "a file")
	wants := []Want{{Container: "app", Index: 0, Path: "a/b"}, {Container: "app", Index: 2, Path: "single"},
		{Container: "init", Index: 1, Path: "new/dir"}, {Container: "app", Index: 3, Problem: "refused"}}
	o, err := p.Prepare(t.Context(), uid, "data", vol, wants)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Mounts) != 3 {
		t.Fatalf("Outcome = %+v, want 3 mounts", o)
	}
	dir, file, made := p.Target(uid, "data", "app", 0), p.Target(uid, "data", "app", 2), p.Target(uid, "data", "init", 1)
	for i, want := range []string{dir, file, made} {
		if o.Mounts[i].Path != want || o.Mounts[i].Error != "" {
			t.Errorf("mount %d = %+v, want path %s", i, o.Mounts[i], want)
		}
		if err := subpathtest.Inside(want, vol); err != nil {
			t.Error(err)
		}
	}
	if got := plugintest.ReadFile(t, filepath.Join(dir, "file")); got != "in a/b" {
		t.Errorf("through the directory's mount: %q", got)
	}
	if got := plugintest.ReadFile(t, file); got != "a file" {
		t.Errorf("through the file's mount: %q", got)
	}
	if fi, err := os.Stat(filepath.Join(vol, "new/dir")); err != nil || fi.Mode().Perm() != 0o777 {
		t.Errorf("the missing subPath: %v, %v; want a directory with the volume's mode 0777", fi, err)
	}
	if !Satisfied(wants, o) {
		t.Errorf("Satisfied(%+v) = false", o)
	}

	// Again (a restart): nothing is remounted.
	before := mountID(t, dir)
	if _, err := p.Prepare(t.Context(), uid, "data", vol, wants); err != nil {
		t.Fatal(err)
	}
	if after := mountID(t, dir); after != before {
		t.Errorf("prepared again: mount ID %d, was %d (remounted)", after, before)
	}

	// The subPath replaced by another directory: made again from it.
	if err := os.Rename(filepath.Join(vol, "a/b"), filepath.Join(vol, "a/old")); err != nil {
		t.Fatal(err)
	}
	plugintest.WriteFile(t, filepath.Join(vol, "a/b/file"), "the new a/b")
	if _, err := p.Prepare(t.Context(), uid, "data", vol, wants[:2]); err != nil {
		t.Fatal(err)
	}
	if got := plugintest.ReadFile(t, filepath.Join(dir, "file")); got != "the new a/b" {
		t.Errorf("after the replacement: %q", got)
	}
	if _, err := os.Lstat(made); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the mount no longer wanted: %v, want it gone", err)
	}

	if err := p.RemovePod(t.Context(), uid); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(p.Dir(uid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after RemovePod: %v, want %s gone", err, p.Dir(uid))
	}
	if got := plugintest.ReadFile(t, filepath.Join(vol, "a/b/file")); got != "the new a/b" {
		t.Errorf("the volume's content after RemovePod: %q", got)
	}
}

// TestRemovePodLeavesWhatItDidNotMake: a file with content, or a
// directory holding something, where a mount point should be stays.
func TestRemovePodLeavesWhatItDidNotMake(t *testing.T) {
	p, _ := setup(t)
	plugintest.WriteFile(t, filepath.Join(p.Dir(uid), "data/app/0/keep"), "x")
	plugintest.WriteFile(t, filepath.Join(p.Dir(uid), "data/app/1"), "x")
	err := p.RemovePod(t.Context(), uid)
	if err == nil {
		t.Fatal("RemovePod removed data it did not make")
	}
	for _, f := range []string{"data/app/0/keep", "data/app/1"} {
		if got := plugintest.ReadFile(t, filepath.Join(p.Dir(uid), f)); got != "x" {
			t.Errorf("%s: %q", f, got)
		}
	}
	if err := os.RemoveAll(p.Dir(uid)); err != nil {
		t.Fatal(err)
	}
}

func TestPrepareRefusesDevices(t *testing.T) {
	p, vol := setup(t)
	if err := unix.Mknod(filepath.Join(vol, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	_, err := p.Prepare(t.Context(), uid, "data", vol, []Want{{Container: "c", Path: "null"}})
	if !errors.Is(err, ErrEscape) {
		t.Errorf("Prepare of a device node: %v, want ErrEscape", err)
	}
}

func TestPrepareNamesPodContainerAndPath(t *testing.T) {
	p, vol := setup(t)
	if err := os.Symlink("/etc", filepath.Join(vol, "link")); err != nil {
		t.Fatal(err)
	}
	o, err := p.Prepare(t.Context(), uid, "data", vol, []Want{{Container: "app", Index: 4, Path: "link/x"}})
	for _, s := range []string{`subPath "link/x"`, `volume "data"`, `container "app"`, "volumeMount 4", "symlink"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("error %v does not say %s", err, s)
		}
	}
	if o.Mounts[0].Error == "" || o.Mounts[0].Path != "" {
		t.Errorf("Outcome %+v: want the error and no path", o.Mounts[0])
	}
}

// TestPrepareHostPathBelowAHostRoot: the path of a volume outside the
// root (a hostPath) is a host path, found below --host-root, as the agent
// in a container sees the host.
func TestPrepareHostPathBelowAHostRoot(t *testing.T) {
	p, _ := setup(t)
	p.HostRoot = t.TempDir()
	plugintest.WriteFile(t, filepath.Join(p.HostRoot, "srv/data/logs/file"), "on the host")
	o, err := p.Prepare(t.Context(), uid, "host", "/srv/data", []Want{{Container: "c", Path: "logs"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := plugintest.ReadFile(t, filepath.Join(o.Mounts[0].Path, "file")); got != "on the host" {
		t.Errorf("through the mount: %q", got)
	}
}

// TestPrepareFollowsLinksInsideTheVolume: relative links that stay inside
// the volume are followed, as the kubelet follows them: a configMap's
// key is a link into its ..data directory, itself a link.
func TestPrepareFollowsLinksInsideTheVolume(t *testing.T) {
	p, vol := setup(t)
	plugintest.WriteFile(t, filepath.Join(vol, "..2026_11_26_14_00_00.1/app.conf"), "from the configMap")
	for link, to := range map[string]string{"..data": "..2026_11_26_14_00_00.1", "app.conf": "..data/app.conf", "dir/up": ".."} {
		mkdir(t, filepath.Dir(filepath.Join(vol, link)))
		if err := os.Symlink(to, filepath.Join(vol, link)); err != nil {
			t.Fatal(err)
		}
	}
	o, err := p.Prepare(t.Context(), uid, "config", vol, []Want{{Container: "c", Index: 0, Path: "app.conf"}, {Container: "c", Index: 1, Path: "dir/up/..data"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := plugintest.ReadFile(t, o.Mounts[0].Path); got != "from the configMap" {
		t.Errorf("the key's mount shows %q", got)
	}
	if got := plugintest.ReadFile(t, filepath.Join(o.Mounts[1].Path, "app.conf")); got != "from the configMap" {
		t.Errorf("the ..data mount shows %q", got)
	}
}
