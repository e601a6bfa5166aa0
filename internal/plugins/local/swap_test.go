package local

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// localSpec is pod web's claim volume bound to a local PV of path on this
// node.
func localSpec(path string) *volume.Spec {
	return &volume.Spec{
		Pod:    &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-1"}},
		Volume: &v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
		PV: &v1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
			Spec:       v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: path}}},
		},
	}
}

// swapDirs is a local PV's directory, and another directory, root's, that
// a swap of the PV's path for a symlink would show instead.
type swapDirs struct {
	vol, other string
	volID      mount.FileID // what the PV's mount must show
	otherID    mount.FileID
}

// newSwapDirs makes vol (below parent, made with uid) and other, each
// holding a file f that says which it is.
func newSwapDirs(t *testing.T, parentUID int) *swapDirs {
	t.Helper()
	plugintest.NeedRoot(t, "bind-mounts directories and gives one to another user")
	base := t.TempDir()
	d := &swapDirs{vol: filepath.Join(base, "disks", "vol"), other: filepath.Join(base, "other")}
	plugintest.WriteFile(t, filepath.Join(d.vol, "f"), "volume")
	plugintest.WriteFile(t, filepath.Join(d.other, "f"), "other")
	for _, err := range []error{os.Chmod(base, 0o755), os.Chmod(d.other, 0o700), os.Chown(filepath.Dir(d.vol), parentUID, 0)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	d.volID, d.otherID = fileIDOf(t, d.vol), fileIDOf(t, d.other)
	return d
}

// swap puts a symlink to other in vol's place; unswap puts vol back.
func (d *swapDirs) swap() error {
	if err := os.Rename(d.vol, d.vol+".away"); err != nil {
		return err
	}
	return os.Symlink(d.other, d.vol)
}

func (d *swapDirs) unswap() error {
	if err := os.Remove(d.vol); err != nil {
		return err
	}
	return os.Rename(d.vol+".away", d.vol)
}

func fileIDOf(t *testing.T, p string) mount.FileID {
	t.Helper()
	fd, err := openDir(p)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFd(fd)
	o, err := openedOf(fd)
	if err != nil {
		t.Fatal(err)
	}
	return o.id
}

// TestLocalPVMountsWhatItChecked: the PV's directory is swapped for a
// symlink to another directory after the agent opened and checked it and
// before it mounts; the mount shows the directory checked, by device and
// inode of its root, and its content.
func TestLocalPVMountsWhatItChecked(t *testing.T) {
	d := newSwapDirs(t, 0)
	mountsWhatItChecked(t, d, &Plugin{Mounter: mount.System{}}, localSpec(d.vol))
}

// mountsWhatItChecked sets s up with p while d's volume is swapped for a
// symlink after it was opened, and checks that the mount shows the volume.
func mountsWhatItChecked(t *testing.T, d *swapDirs, p volume.Plugin, s *volume.Spec) {
	t.Helper()
	testHookOpened = func() {
		if err := d.swap(); err != nil {
			t.Error(err)
		}
	}
	defer func() { testHookOpened = nil }()
	dir := plugintest.VolumeDir(t)
	if _, err := p.SetUp(t.Context(), s, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.TearDown(t.Context(), dir) })
	id, mounted, err := mount.MountRoot(t.Context(), dir)
	if err != nil || !mounted || id != d.volID {
		t.Errorf("the mount shows %+v (mounted %v, %v); want the PV's directory %+v (the other is %+v)", id, mounted, err, d.volID, d.otherID)
	}
	if got := plugintest.ReadFile(t, filepath.Join(dir, "f")); got != "volume" {
		t.Errorf("the volume holds %q; want the PV's file", got)
	}
}

// swapping swaps d's volume for a symlink and back, as fast as it can,
// until the function it returns is called.
func swapping(t *testing.T, d *swapDirs) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done.Load() {
			if err := d.swap(); err != nil {
				t.Error(err)
				return
			}
			if err := d.unswap(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	return func() { done.Store(true); wg.Wait() }
}

// TestLocalPVPathSwapRace: the directory holding the PV's directory
// belongs to a user (uid 1000), who can swap the PV's directory for a
// symlink to any other directory, and does, as fast as it can, while the
// agent sets the volume up and tears it down again and again. The mount
// never shows the other directory: the path is refused, naming the
// user's directory.
func TestLocalPVPathSwapRace(t *testing.T) {
	d := newSwapDirs(t, 1000)
	defer swapping(t, d)()
	p := &Plugin{Mounter: mount.System{}}
	const setUps = 300
	var refused int
	for i := range setUps {
		dir := plugintest.VolumeDir(t)
		_, err := p.SetUp(t.Context(), localSpec(d.vol), dir)
		if err != nil {
			if !strings.Contains(err.Error(), "spec.local.path is refused") || !strings.Contains(err.Error(), "belongs to uid 1000") {
				t.Fatalf("set-up %d: %v; want a refusal naming the user's directory", i, err)
			}
			refused++
			continue
		}
		id, _, err := mount.MountRoot(t.Context(), dir)
		if err != nil {
			t.Fatal(err)
		}
		if id == d.otherID {
			t.Fatalf("set-up %d of %d: the mount shows the other directory", i+1, setUps)
		}
		if err := p.TearDown(t.Context(), dir); err != nil {
			t.Fatal(err)
		}
	}
	if refused != setUps {
		t.Errorf("%d of %d set-ups refused; want all", refused, setUps)
	}
}

func closeFd(fd int) { _ = unix.Close(fd) }

// TestRawBlockPathAUserCanChangeIsRefused: a PV of volumeMode Block whose
// path goes through a directory a user owns (here a symlink to a loop
// device, which the user could point at any device) is refused, and
// nothing is published.
func TestRawBlockPathAUserCanChangeIsRefused(t *testing.T) {
	plugintest.NeedRoot(t, "attaches a loop device")
	dev := plugintest.LoopDevice(t)
	base := t.TempDir()
	user := filepath.Join(base, "user")
	for _, err := range []error{os.Chmod(base, 0o755), os.Mkdir(user, 0o755), os.Symlink(dev, filepath.Join(user, "dev")), os.Chown(user, 1000, 1000)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	s := localSpec(filepath.Join(user, "dev"))
	block := v1.PersistentVolumeBlock
	s.PV.Spec.VolumeMode = &block
	p := &Plugin{Mounter: mount.System{}}
	published := filepath.Join(t.TempDir(), "pv-1")
	_, err := p.MapDevice(t.Context(), s, published)
	if err == nil || !strings.Contains(err.Error(), "spec.local.path is refused") || !strings.Contains(err.Error(), user+" belongs to uid 1000") {
		t.Fatalf("MapDevice = %v; want a refusal naming %s", err, user)
	}
	if _, err := os.Lstat(published); !os.IsNotExist(err) {
		t.Errorf("something was published at %s: %v", published, err)
	}
}
