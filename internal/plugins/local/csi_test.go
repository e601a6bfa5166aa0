package local_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/local"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// csiSpec is pvSpec bound instead to the CSI PV pv-1 of the local driver,
// of the volume handle, pinned to node-1 as the external-provisioner pins
// it.
func csiSpec(handle string) *volume.Spec {
	s := pvSpec("")
	s.PV.Spec.Local = nil
	s.PV.Spec.CSI = &v1.CSIPersistentVolumeSource{Driver: local.Driver, VolumeHandle: handle}
	s.PV.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0] = v1.NodeSelectorRequirement{
		Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{"node-1"}}
	return s
}

// csiRoot is a local path root (0700, as the provisioner makes it) holding
// the volume ns-data-pv-1 (0777, as the provisioner makes it) with a file.
func csiRoot(t *testing.T) (root, handle string) {
	t.Helper()
	root, handle = filepath.Join(t.TempDir(), "local"), "ns-data-pv-1"
	plugintest.WriteFile(t, filepath.Join(root, handle, "label"), "on the volume")
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, handle), 0o777); err != nil {
		t.Fatal(err)
	}
	return root, handle
}

func csiPlugin(m mount.Mounter, root string) *local.CSIPlugin {
	return &local.CSIPlugin{Local: &local.Plugin{Mounter: m, NodeName: "node-1"}, Root: root}
}

// A CSI PV of the local driver is set up as the local PV of its directory
// would be: bind-mounted from the volume under the root (what the pod
// writes lands there), given the pod's fsGroup, read-only when the claim
// volume or the PV says so; teardown leaves the data.
func TestCSISetUp(t *testing.T) {
	plugintest.NeedRoot(t, "bind-mounts a directory")
	ctx := context.Background()
	root, handle := csiRoot(t)
	vol := filepath.Join(root, handle)
	p := csiPlugin(mount.System{}, root)
	s := csiSpec(handle)
	s.Pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr[int64](4321)}
	if err := p.Validate(s); err != nil {
		t.Fatal(err)
	}
	dir := plugintest.VolumeDir(t)
	res, err := p.SetUp(ctx, s, dir)
	if err != nil {
		t.Fatal(err)
	}
	if res.Path != dir {
		t.Errorf("SetUp path = %s, want %s", res.Path, dir)
	}
	if got := plugintest.ReadFile(t, filepath.Join(dir, "label")); got != "on the volume" {
		t.Errorf("the volume directory holds %q", got)
	}
	plugintest.WriteFile(t, filepath.Join(dir, "written-by-pod"), "pod data")
	if got := plugintest.ReadFile(t, filepath.Join(vol, "written-by-pod")); got != "pod data" {
		t.Errorf("the pod's write shows %q in the volume", got)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(vol, &st); err != nil || st.Gid != 4321 {
		t.Errorf("the volume's group = %d (%v), want the fsGroup 4321", st.Gid, err)
	}
	if err := p.TearDown(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("TearDown left %s: %v", dir, err)
	}
	if got := plugintest.ReadFile(t, filepath.Join(vol, "written-by-pod")); got != "pod data" {
		t.Errorf("after TearDown the volume holds %q", got)
	}

	for name, edit := range map[string]func(*volume.Spec){
		"claim volume readOnly": func(s *volume.Spec) { s.Volume.PersistentVolumeClaim.ReadOnly = true },
		"spec.csi.readOnly":     func(s *volume.Spec) { s.PV.Spec.CSI.ReadOnly = true },
	} {
		t.Run(name, func(t *testing.T) {
			s := csiSpec(handle)
			edit(s)
			dir := plugintest.VolumeDir(t)
			if _, err := p.SetUp(ctx, s, dir); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.TearDown(ctx, dir) })
			if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
				t.Errorf("write into the volume: %v, want EROFS", err)
			}
		})
	}
}

// Nothing is opened or mounted for a PV whose handle is not one plain
// name under the root, names a symlink there (to a directory outside),
// or names something that is not a volume directory; the volume directory
// is not even made.
func TestCSIRefusesForgedHandles(t *testing.T) {
	plugintest.NeedRoot(t, "bind-mounts a directory")
	ctx := context.Background()
	root, handle := csiRoot(t)
	outside := t.TempDir()
	plugintest.WriteFile(t, filepath.Join(outside, "secret"), "not the pod's")
	// A subdirectory of a volume exists: "a/b" must be refused by its
	// name, not because nothing is there.
	plugintest.WriteFile(t, filepath.Join(root, handle, "sub", "f"), "a volume's subdirectory")
	for _, err := range []error{
		os.Symlink(outside, filepath.Join(root, "evil")),
		os.Symlink(handle, filepath.Join(root, "alias")), // another volume, by another name
		os.Mkdir(filepath.Join(root, ".pending-delete-old"), 0o777),
		os.WriteFile(filepath.Join(root, "file"), nil, 0o600),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	p := csiPlugin(mount.System{}, root)
	for _, tc := range []struct {
		handle, want string
		validates    bool // the name is fine: the open refuses it
	}{
		{handle: "../etc", want: "contains '/'"},
		{handle: handle + "/sub", want: "contains '/'"},
		{handle: "", want: "not a usable directory name"},
		{handle: ".", want: "not a usable directory name"},
		{handle: "..", want: "not a usable directory name"},
		{handle: ".pending-delete-old", want: "starts with a dot"},
		{handle: "evil", want: "is a symlink, refused", validates: true},
		{handle: "alias", want: "is a symlink, refused", validates: true},
		{handle: "file", want: "is not a directory", validates: true},
		{handle: "missing", want: "does not exist on this node", validates: true},
	} {
		t.Run(tc.handle, func(t *testing.T) {
			s := csiSpec(tc.handle)
			if err := p.Validate(s); (err == nil) != tc.validates || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate = %v; want validates %v, else an error with %q", err, tc.validates, tc.want)
			}
			dir := plugintest.VolumeDir(t)
			if _, err := p.SetUp(ctx, s, dir); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "PersistentVolume pv-1") {
				t.Errorf("SetUp = %v; want an error naming pv-1 with %q", err, tc.want)
			}
			if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused SetUp made %s: %v", dir, err)
			}
		})
	}
	if n := len(plugintest.Mounts(t, outside)) + len(plugintest.Mounts(t, root)); n != 0 {
		t.Errorf("%d mounts of the root or of the symlink's target", n)
	}
	if got := plugintest.ReadFile(t, filepath.Join(outside, "secret")); got != "not the pod's" {
		t.Errorf("the symlink's target holds %q", got)
	}
}

// A CSI PV of another driver is not this plugin's; a PV of the local
// driver on another node, or without the local path root, is refused
// before anything is touched, saying what to do.
func TestCSIRefusesOtherDriversNodesAndNoRoot(t *testing.T) {
	root, handle := csiRoot(t)
	p := csiPlugin(&mount.Fake{}, root)
	other := csiSpec(handle)
	other.PV.Spec.CSI.Driver = "example.com/disk"
	if p.CanSupportPV(other.PV) {
		t.Error("CanSupportPV of another driver's PV = true")
	}
	if !p.CanSupportPV(csiSpec(handle).PV) {
		t.Error("CanSupportPV of the local driver's PV = false")
	}
	if p.CanSupport(&v1.Volume{Name: "inline", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: local.Driver}}}) {
		t.Error("CanSupport of an inline CSI volume = true")
	}
	elsewhere := csiSpec(handle)
	elsewhere.PV.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values = []string{"node-2"}
	unpinned := csiSpec(handle)
	unpinned.PV.Spec.NodeAffinity = nil
	for _, tc := range []struct {
		name string
		p    *local.CSIPlugin
		spec *volume.Spec
		want []string
	}{
		{"another driver", p, other, []string{"spec.csi.driver \"example.com/disk\"", "its own driver local.volume-agent.io only"}},
		{"another node", p, elsewhere, []string{"node affinity check failed", "does not match node node-1"}},
		{"no node affinity", p, unpinned, []string{"needs spec.nodeAffinity.required"}},
		{"no local path root", csiPlugin(&mount.Fake{}, ""), csiSpec(handle), []string{"without the local provisioner", "--provisioners local", "--local-path-root"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := plugintest.VolumeDir(t)
			for what, err := range map[string]error{
				"Validate": tc.p.Validate(tc.spec),
				"SetUp":    second(tc.p.SetUp(context.Background(), tc.spec, dir)),
			} {
				for _, want := range tc.want {
					if err == nil || !strings.Contains(err.Error(), want) {
						t.Errorf("%s = %v; want an error with %q", what, err, want)
					}
				}
			}
			if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused SetUp made %s: %v", dir, err)
			}
		})
	}
}

func second[T any](_ T, err error) error { return err }

// A CSI PV of volumeMode Block names the volume's image, <root>/<handle>.img:
// its loop device is published as a local PV's is; an image no loop
// device is attached to, a directory, or a symlink in the image's place
// is refused, and nothing is published.
func TestCSIMapDevice(t *testing.T) {
	ctx, published := blockRoot(t)
	dev := plugintest.LoopDevice(t)
	out, err := exec.Command("losetup", "--noheadings", "--output", "BACK-FILE", dev).Output()
	if err != nil {
		t.Fatal(err)
	}
	img := strings.TrimSpace(string(out))
	root, handle := filepath.Dir(img), strings.TrimSuffix(filepath.Base(img), ".img")
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	p := csiPlugin(mount.System{}, root)
	s := csiSpec(handle)
	s.PV.Spec.VolumeMode = ptr(v1.PersistentVolumeBlock)
	path := devicePath(published, "a")
	if _, err := p.MapDevice(ctx, s, path); err != nil {
		t.Fatal(err)
	}
	if rdevOf(t, path) != rdevOf(t, dev) {
		t.Fatal("the published file does not show the image's loop device")
	}
	if _, err := p.MapDevice(ctx, s, path); err != nil || len(plugintest.Mounts(t, path)) != 1 {
		t.Fatalf("a second MapDevice: %v, %d mounts; want one", err, len(plugintest.Mounts(t, path)))
	}
	if err := p.UnmapDevice(ctx, path); err != nil {
		t.Fatal(err)
	}
	gone(t, path)
	if rdevOf(t, dev) == 0 {
		t.Fatal("the device is gone")
	}

	plugintest.WriteFile(t, filepath.Join(root, "detached.img"), "")
	if err := os.Mkdir(filepath.Join(root, "dir.img"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(img, filepath.Join(root, "link.img")); err != nil {
		t.Fatal(err)
	}
	for handle, want := range map[string]string{
		"detached": "no loop device is attached",
		"dir":      "is not the image of a raw block volume",
		"link":     "is a symlink, refused",
		"../x":     "contains '/'",
	} {
		s := csiSpec(handle)
		s.PV.Spec.VolumeMode = ptr(v1.PersistentVolumeBlock)
		path := devicePath(published, "refused")
		if _, err := p.MapDevice(ctx, s, path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("MapDevice of %s = %v; want an error with %q", handle, err, want)
		}
		gone(t, path)
	}
	if _, err := p.SetUp(ctx, s, plugintest.VolumeDir(t)); err == nil {
		t.Error("SetUp of a Block PV succeeded")
	}
}
