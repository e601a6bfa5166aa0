package local_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/local"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// blockSpec is pvSpec of volumeMode Block on dev.
func blockSpec(dev string) *volume.Spec {
	s := pvSpec(dev)
	s.PV.Spec.VolumeMode = ptr(v1.PersistentVolumeBlock)
	return s
}

// devicePath is where pod uid's device of pv-1 is published below root.
func devicePath(root, uid string) string {
	return filepath.Join(root, "pods", uid, "volumeDevices", "kubernetes.io~local-volume", "pv-1")
}

// rdevOf is the device number of the block device at path, following a
// bind mount but not a symlink.
func rdevOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		t.Fatalf("%s is not a block device (mode %o)", path, st.Mode)
	}
	return st.Rdev
}

// blockRoot is an agent's root for a test of published devices, whose
// mounts are taken off when the test ends.
func blockRoot(t *testing.T) (context.Context, string) {
	t.Helper()
	plugintest.NeedRoot(t, "attaches a loop device and bind-mounts it")
	root := t.TempDir()
	t.Cleanup(func() { plugintest.UnmountAll(t, root) })
	return context.Background(), root
}

// gone fails t unless nothing is at path.
func gone(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("%s: %v, want nothing there", path, err)
	}
}

// Two pods publish one device; what one writes through its published file
// the other reads; a second MapDevice changes nothing; unpublishing one
// keeps the other, and removes only the file the agent made.
func TestMapDeviceSharedByTwoPods(t *testing.T) {
	ctx, root := blockRoot(t)
	dev := plugintest.LoopDevice(t)
	p := &local.Plugin{Mounter: mount.System{}}
	s := blockSpec(dev)
	a, b := devicePath(root, "a"), devicePath(root, "b")
	for _, path := range []string{a, b, a} {
		res, err := p.MapDevice(ctx, s, path)
		if err != nil {
			t.Fatal(err)
		}
		if res.Path != path {
			t.Errorf("MapDevice path = %s, want %s", res.Path, path)
		}
	}
	if n := len(plugintest.Mounts(t, a)); n != 1 {
		t.Fatalf("%d mounts at %s after two MapDevice, want 1", n, a)
	}
	if rdevOf(t, a) != rdevOf(t, dev) || rdevOf(t, b) != rdevOf(t, dev) {
		t.Fatal("the published files do not show the PV's device")
	}
	want := []byte("written through pod a")
	writeAt(t, a, want)
	if got := readAt(t, b, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("read through pod b = %q, want %q", got, want)
	}
	if err := p.UnmapDevice(ctx, a); err != nil {
		t.Fatal(err)
	}
	gone(t, a)
	if got := readAt(t, b, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("read through pod b after pod a's teardown = %q, want %q", got, want)
	}
	if err := p.UnmapDevice(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := p.UnmapDevice(ctx, b); err != nil {
		t.Fatalf("UnmapDevice of a path already gone: %v", err)
	}
	if rdevOf(t, dev) == 0 {
		t.Fatal("the device node is gone")
	}
	if got := readAt(t, dev, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("the device holds %q after the teardowns, want %q", got, want)
	}
}

// A crash between creating the file and mounting on it leaves an empty
// file: MapDevice mounts on it, UnmapDevice removes it.
func TestMapDeviceAfterACrash(t *testing.T) {
	ctx, root := blockRoot(t)
	p := &local.Plugin{Mounter: mount.System{}}
	a, b := devicePath(root, "a"), devicePath(root, "b")
	for _, path := range []string{a, b} {
		plugintest.WriteFile(t, path, "")
	}
	dev := plugintest.LoopDevice(t)
	if _, err := p.MapDevice(ctx, blockSpec(dev), a); err != nil {
		t.Fatal(err)
	}
	if rdevOf(t, a) != rdevOf(t, dev) {
		t.Fatal("the published file does not show the PV's device")
	}
	if err := p.UnmapDevice(ctx, b); err != nil {
		t.Fatal(err)
	}
	gone(t, b)
}

// Nothing the agent did not make is published on, or removed: a symlink
// planted at the path, a file with data, a device node made by hand; nor
// is a path that is not a block device published.
func TestMapDeviceRefuses(t *testing.T) {
	ctx, root := blockRoot(t)
	p := &local.Plugin{Mounter: mount.System{}}
	dev := plugintest.LoopDevice(t)
	outside := filepath.Join(t.TempDir(), "outside")
	plugintest.WriteFile(t, outside, "")

	link := devicePath(root, "link")
	plugintest.WriteFile(t, filepath.Join(filepath.Dir(link), "x"), "")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	data := devicePath(root, "data")
	plugintest.WriteFile(t, data, "not the agent's")
	node := devicePath(root, "node")
	plugintest.WriteFile(t, filepath.Join(filepath.Dir(node), "x"), "")
	if err := unix.Mknod(node, unix.S_IFBLK|0o600, int(rdevOf(t, dev))); err != nil { //nolint:gosec // G115: a loop device's number fits
		t.Fatal(err)
	}
	for _, path := range []string{link, node} {
		if _, err := p.MapDevice(ctx, blockSpec(dev), path); err == nil {
			t.Errorf("MapDevice on %s succeeded", path)
		}
	}
	for _, path := range []string{link, data, node} {
		if err := p.UnmapDevice(ctx, path); err == nil || !strings.Contains(err.Error(), "leaving it") {
			t.Errorf("UnmapDevice of %s = %v, want it left", path, err)
		}
		if _, err := os.Lstat(path); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	if n := len(plugintest.Mounts(t, outside)); n != 0 {
		t.Errorf("a mount on the symlink's target %s", outside)
	}
	for _, tc := range []struct{ name, path, want string }{
		{"directory", t.TempDir(), "not a block device"},
		{"missing", filepath.Join(root, "missing"), "does not exist"},
	} {
		path := devicePath(root, tc.name)
		if _, err := p.MapDevice(ctx, blockSpec(tc.path), path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("MapDevice of a %s = %v, want %q", tc.name, err, tc.want)
		}
		gone(t, path)
	}
	if _, err := p.MapDevice(ctx, pvSpec(dev), devicePath(root, "fs")); err == nil {
		t.Error("MapDevice of a Filesystem PV succeeded")
	}
	if _, err := p.SetUp(ctx, blockSpec(dev), plugintest.VolumeDir(t)); err == nil {
		t.Error("SetUp of a Block PV succeeded")
	}
}

// A PV of volumeMode Block may name a file attached to a loop device (the
// image of a provisioned raw block volume): its loop device is published.
// A file no loop device is attached to is refused; none is attached.
func TestMapDeviceOfAnImage(t *testing.T) {
	ctx, root := blockRoot(t)
	p := &local.Plugin{Mounter: mount.System{}}
	dev := plugintest.LoopDevice(t)
	out, err := exec.Command("losetup", "--noheadings", "--output", "BACK-FILE", dev).Output()
	if err != nil {
		t.Fatal(err)
	}
	img := strings.TrimSpace(string(out))
	path := devicePath(root, "a")
	if _, err := p.MapDevice(ctx, blockSpec(img), path); err != nil {
		t.Fatal(err)
	}
	if rdevOf(t, path) != rdevOf(t, dev) {
		t.Fatal("the published file does not show the image's loop device")
	}
	if err := p.UnmapDevice(ctx, path); err != nil {
		t.Fatal(err)
	}
	detached := filepath.Join(t.TempDir(), "detached.img")
	plugintest.WriteFile(t, detached, "")
	if _, err := p.MapDevice(ctx, blockSpec(detached), devicePath(root, "b")); err == nil || !strings.Contains(err.Error(), "no loop device is attached") {
		t.Fatalf("MapDevice of a file without a loop device = %v", err)
	}
	if out, _ := exec.Command("losetup", "--associated", detached, "--noheadings").Output(); len(out) > 0 {
		t.Fatalf("a loop device was attached to %s: %s", detached, out)
	}
	gone(t, devicePath(root, "b"))
}

func writeAt(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func readAt(t *testing.T, path string, n int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	return buf
}
