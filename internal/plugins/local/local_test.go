package local_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	zapobserver "go.uber.org/zap/zaptest/observer"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mountutils "k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/local"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/volume"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ptr[T any](v T) *T { return &v }

// pvSpec is pod web's claim volume, bound to the local PV pv-1 at path on
// node-1.
func pvSpec(path string) *volume.Spec {
	return &volume.Spec{
		Pod:    &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-1"}},
		Volume: &v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
		PV: &v1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
			Spec: v1.PersistentVolumeSpec{
				PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: path}},
				NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
					MatchExpressions: []v1.NodeSelectorRequirement{{Key: "disk", Operator: v1.NodeSelectorOpIn, Values: []string{"ssd"}}},
				}}}},
			},
		},
	}
}

func TestValidateNodeAffinity(t *testing.T) {
	p := &local.Plugin{NodeName: "node-1"}
	ssd := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"disk": "ssd"}}}
	for _, tc := range []struct {
		name    string
		node    *v1.Node
		edit    func(*volume.Spec)
		wantErr string
	}{
		{name: "labels of the Node object match", node: ssd},
		{name: "no Node object: no labels", wantErr: "node affinity check failed"},
		{name: "hostname label without a Node object", edit: func(s *volume.Spec) {
			s.PV.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0] = v1.NodeSelectorRequirement{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{"node-1"}}
		}},
		{name: "another node's hostname", node: ssd, edit: func(s *volume.Spec) {
			s.PV.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0] = v1.NodeSelectorRequirement{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{"node-2"}}
		}, wantErr: "node affinity check failed"},
		{name: "no affinity", node: ssd, edit: func(s *volume.Spec) { s.PV.Spec.NodeAffinity = nil }, wantErr: "needs spec.nodeAffinity.required"},
		{name: "relative path", node: ssd, edit: func(s *volume.Spec) { s.PV.Spec.Local.Path = "mnt/disk" }, wantErr: "clean absolute path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := pvSpec("/mnt/disk")
			s.Node = tc.node
			if tc.edit != nil {
				tc.edit(s)
			}
			err := p.Validate(s)
			if (err != nil) != (tc.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate = %v, want error %q", err, tc.wantErr)
			}
		})
	}
}

func TestReadOnlyAndMountOptions(t *testing.T) {
	plugintest.NeedRoot(t, "bind-mounts a directory")
	ctx := context.Background()
	src := t.TempDir()
	p := &local.Plugin{Mounter: mount.System{}}
	s := pvSpec(src)
	s.Volume.PersistentVolumeClaim.ReadOnly = true
	s.PV.Spec.MountOptions = []string{"noexec", "rw"} // the claim's readOnly wins
	dir := plugintest.VolumeDir(t)
	if _, err := p.SetUp(ctx, s, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.TearDown(ctx, dir) })
	infos := plugintest.Mounts(t, dir)
	if len(infos) != 1 || !slices.Contains(strings.Split(infos[0].Options, ","), "ro") || !slices.Contains(strings.Split(infos[0].Options, ","), "noexec") {
		t.Fatalf("mounts at %s = %+v; want one bind mount, ro and noexec", dir, infos)
	}
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write into a read-only volume: %v, want EROFS", err)
	}
}

// A file system option (discard) goes to a device's global mount only; the
// pod's bind mount takes the options it can apply. On a directory, which
// has no mount of its own to take it, the option fails the set-up rather
// than being dropped.
func TestFileSystemMountOptions(t *testing.T) {
	plugintest.NeedRoot(t, "attaches a loop device and mounts it")
	ctx := context.Background()
	root := t.TempDir()
	t.Cleanup(func() { plugintest.UnmountAll(t, root) })
	p := &local.Plugin{Mounter: mount.System{}, Devices: devices(t, root)}
	s := pvSpec(plugintest.LoopDevice(t))
	s.PV.Spec.MountOptions = []string{"discard", "noexec"}
	dir := filepath.Join(root, "pods", "a", "volumes", "kubernetes.io~local-volume", "pv-1")
	if _, err := p.SetUp(ctx, s, dir); err != nil {
		t.Fatalf("SetUp of a device with discard,noexec: %v", err)
	}
	global := plugintest.Mounts(t, filepath.Join(root, "plugins", local.Name, "mounts", "pv-1"))
	if len(global) != 1 || !strings.Contains(global[0].VFSOptions, "discard") {
		t.Errorf("global mount = %+v, want one with discard", global)
	}
	if infos := plugintest.Mounts(t, dir); len(infos) != 1 || !slices.Contains(strings.Split(infos[0].Options, ","), "noexec") {
		t.Errorf("pod's bind mount = %+v, want one, noexec", infos)
	}
	if err := p.TearDown(ctx, dir); err != nil {
		t.Fatal(err)
	}
	s = pvSpec(t.TempDir())
	s.PV.Spec.MountOptions = []string{"discard"}
	dir = plugintest.VolumeDir(t)
	if _, err := p.SetUp(ctx, s, dir); err == nil || !strings.Contains(err.Error(), "discard") {
		t.Fatalf("SetUp of a directory with discard = %v, want an error naming the option", err)
	}
	if n := len(plugintest.Mounts(t, dir)); n != 0 {
		t.Errorf("%d mounts left at %s after a refused option", n, dir)
	}
}

func TestFSGroupOwnership(t *testing.T) {
	plugintest.NeedRoot(t, "bind-mounts a directory and changes owners")
	ctx := context.Background()
	src := t.TempDir()
	plugintest.WriteFile(t, filepath.Join(src, "sub", "f"), "data")
	if err := os.Chmod(filepath.Join(src, "sub", "f"), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "outside")
	plugintest.WriteFile(t, outside, "not ours")
	if err := os.Symlink(outside, filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	p := &local.Plugin{Mounter: mount.System{}}
	s := pvSpec(src)
	s.Pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr[int64](4321)}
	dir := plugintest.VolumeDir(t)
	if _, err := p.SetUp(ctx, s, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.TearDown(ctx, dir) })
	for path, want := range map[string]os.FileMode{
		src:                            0o770 | os.ModeSetgid | os.ModeDir,
		filepath.Join(src, "sub"):      0o770 | os.ModeSetgid | os.ModeDir,
		filepath.Join(src, "sub", "f"): 0o660,
	} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if gid := fi.Sys().(*syscall.Stat_t).Gid; gid != 4321 || fi.Mode()&want != want {
			t.Errorf("%s: gid %d mode %v; want gid 4321 and at least %v", path, gid, fi.Mode(), want)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(outside, &st); err != nil || st.Gid == 4321 || st.Mode&0o777 != 0o644 {
		t.Errorf("the target of a symlink in the volume was changed: gid %d mode %o", st.Gid, st.Mode&0o777)
	}
}

// A file of the volume with a hard link outside it keeps its group and
// modes (the pod would get the file outside too), and SetUp warns.
func TestFSGroupLeavesFilesLinkedOutside(t *testing.T) {
	plugintest.NeedRoot(t, "bind-mounts a directory and changes owners")
	ctx := context.Background()
	src, outside := t.TempDir(), filepath.Join(t.TempDir(), "outside")
	plugintest.WriteFile(t, outside, "not ours")
	if err := os.Chmod(outside, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(outside, filepath.Join(src, "linked")); err != nil {
		t.Fatal(err)
	}
	core, logs := zapobserver.New(zap.InfoLevel)
	p := &local.Plugin{Mounter: mount.System{}, Logger: zap.New(core)}
	s := pvSpec(src)
	s.Pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr[int64](4321)}
	dir := plugintest.VolumeDir(t)
	if _, err := p.SetUp(ctx, s, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.TearDown(ctx, dir) })
	var st syscall.Stat_t
	if err := syscall.Stat(outside, &st); err != nil || st.Gid == 4321 || st.Mode&0o777 != 0o600 {
		t.Errorf("a file linked into the volume was changed: gid %d mode %o", st.Gid, st.Mode&0o777)
	}
	warned := logs.FilterMessage("fsGroup not given to files with more than one hard link").All()
	if len(warned) != 1 || warned[0].Level != zap.WarnLevel || warned[0].ContextMap()["entries"] != int64(1) ||
		warned[0].ContextMap()["pod"] != "ns/web" || warned[0].ContextMap()["volume"] != "data" {
		t.Errorf("warnings = %+v; want one naming pod ns/web, volume data and 1 entry", warned)
	}
}

func TestMissingPathFails(t *testing.T) {
	p := &local.Plugin{Mounter: &mount.Fake{}}
	dir := plugintest.VolumeDir(t)
	_, err := p.SetUp(context.Background(), pvSpec(filepath.Join(t.TempDir(), "gone")), dir)
	if err == nil || !strings.Contains(err.Error(), "does not exist on this node") {
		t.Fatalf("SetUp of a missing path = %v", err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed SetUp left %s", dir)
	}
}

// The PV's path is a host path: below --host-root it resolves as on the
// host, an absolute symlink included.
func TestPathResolvedInTheHostRoot(t *testing.T) {
	plugintest.NeedRoot(t, "bind-mounts a directory")
	ctx := context.Background()
	host := t.TempDir()
	plugintest.WriteFile(t, filepath.Join(host, "disks", "real", "f"), "on the host")
	if err := os.Symlink("/disks/real", filepath.Join(host, "disks", "link")); err != nil {
		t.Fatal(err)
	}
	p := &local.Plugin{Mounter: mount.System{}, HostRoot: host}
	dir := plugintest.VolumeDir(t)
	if _, err := p.SetUp(ctx, pvSpec("/disks/link"), dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.TearDown(ctx, dir) })
	if got := plugintest.ReadFile(t, filepath.Join(dir, "f")); got != "on the host" {
		t.Fatalf("volume content = %q", got)
	}
}

// TearDown unmounts and removes the empty mount point, nothing else: files
// in the volume directory that are not on the PV (written while it was not
// mounted) stay, and so does the directory.
func TestTearDownNeverDeletesFiles(t *testing.T) {
	dir := plugintest.VolumeDir(t)
	plugintest.WriteFile(t, filepath.Join(dir, "stray"), "keep")
	err := (&local.Plugin{Mounter: &mount.Fake{}}).TearDown(context.Background(), dir)
	if err == nil || !strings.Contains(err.Error(), "still holds files") {
		t.Fatalf("TearDown of a directory with files = %v; want a refusal", err)
	}
	if got := plugintest.ReadFile(t, filepath.Join(dir, "stray")); got != "keep" {
		t.Fatalf("stray file = %q", got)
	}
}

func devices(t *testing.T, root string) *local.Devices {
	return &local.Devices{
		Dir: filepath.Join(root, "plugins", local.Name, "mounts"), PodsDir: filepath.Join(root, "pods"),
		Mounter: mount.System{}, Formatter: mountutils.NewSafeFormatAndMount(mountutils.NewWithoutSystemd(""), utilexec.New()),
	}
}

// A block device is formatted when it is empty, mounted once for the PV
// and bind-mounted into each pod; the global mount goes with the last pod.
func TestBlockDeviceSharedByTwoPods(t *testing.T) {
	plugintest.NeedRoot(t, "attaches a loop device and mounts it")
	ctx := context.Background()
	dev := plugintest.LoopDevice(t)
	root := t.TempDir()
	p := &local.Plugin{Mounter: mount.System{}, Devices: devices(t, root)}
	global := filepath.Join(root, "plugins", local.Name, "mounts", "pv-1")
	dirA := filepath.Join(root, "pods", "a", "volumes", "kubernetes.io~local-volume", "pv-1")
	dirB := filepath.Join(root, "pods", "b", "volumes", "kubernetes.io~local-volume", "pv-1")
	t.Cleanup(func() { plugintest.UnmountAll(t, root) })
	for _, dir := range []string{dirA, dirB} {
		if _, err := p.SetUp(ctx, pvSpec(dev), dir); err != nil {
			t.Fatal(err)
		}
	}
	if out, _ := exec.Command("blkid", "-o", "value", "-s", "TYPE", dev).Output(); strings.TrimSpace(string(out)) != "ext4" {
		t.Fatalf("device type = %q, want ext4 (formatted when empty)", out)
	}
	plugintest.WriteFile(t, filepath.Join(dirA, "shared"), "from a")
	if got := plugintest.ReadFile(t, filepath.Join(dirB, "shared")); got != "from a" {
		t.Fatalf("pod b sees %q, want pod a's file", got)
	}
	if n := len(plugintest.Mounts(t, global)); n != 1 {
		t.Fatalf("%d mounts at the global mount, want 1", n)
	}
	if err := p.TearDown(ctx, dirA); err != nil {
		t.Fatal(err)
	}
	if n := len(plugintest.Mounts(t, global)); n != 1 {
		t.Fatal("the global mount went with the first of two pods")
	}
	if err := p.TearDown(ctx, dirB); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(global); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("global mount point left after the last pod: %v", err)
	}
	// The data stays on the device: mounted again, it is there.
	if _, err := p.SetUp(ctx, pvSpec(dev), dirA); err != nil {
		t.Fatal(err)
	}
	if got := plugintest.ReadFile(t, filepath.Join(dirA, "shared")); got != "from a" {
		t.Fatalf("after remounting the device: %q", got)
	}
	if err := p.TearDown(ctx, dirA); err != nil {
		t.Fatal(err)
	}
}

// A global mount left behind (a crash between a pod's teardown and the
// release) is swept; one still in use is not.
func TestSweepReleasesUnusedGlobalMounts(t *testing.T) {
	plugintest.NeedRoot(t, "attaches a loop device and mounts it")
	ctx := context.Background()
	dev := plugintest.LoopDevice(t)
	root := t.TempDir()
	d := devices(t, root)
	p := &local.Plugin{Mounter: mount.System{}, Devices: d}
	t.Cleanup(func() { plugintest.UnmountAll(t, root) })
	dir := filepath.Join(root, "pods", "a", "volumes", "kubernetes.io~local-volume", "pv-1")
	if _, err := p.SetUp(ctx, pvSpec(dev), dir); err != nil {
		t.Fatal(err)
	}
	global := filepath.Join(d.Dir, "pv-1")
	if err := p.Sweep(ctx); err != nil || len(plugintest.Mounts(t, global)) != 1 {
		t.Fatalf("Sweep = %v; a global mount in use must stay", err)
	}
	if err := mount.RemoveMountPoint(ctx, mount.System{}, dir); err != nil { // a teardown cut short
		t.Fatal(err)
	}
	if err := p.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(global); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unused global mount left after Sweep: %v", err)
	}
}

// A device that holds a partition table is never formatted.
func TestDeviceWithAPartitionTableIsNotFormatted(t *testing.T) {
	plugintest.NeedRoot(t, "attaches a loop device")
	dev := plugintest.LoopDevice(t)
	// An MBR with one Linux partition: sector 0 ends with 0x55AA, and the
	// first entry (at 446) has type 0x83 from LBA 2048.
	mbr := make([]byte, 512)
	entry := mbr[446:462]
	entry[4] = 0x83
	copy(entry[8:12], []byte{0x00, 0x08, 0x00, 0x00})
	copy(entry[12:16], []byte{0x00, 0x80, 0x00, 0x00})
	mbr[510], mbr[511] = 0x55, 0xaa
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Write(mbr)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command("blkid", "-p", "-o", "value", "-s", "PTTYPE", dev).Output(); strings.TrimSpace(string(out)) == "" {
		t.Skip("blkid does not see the partition table written by the test")
	}
	root := t.TempDir()
	p := &local.Plugin{Mounter: mount.System{}, Devices: devices(t, root)}
	t.Cleanup(func() { plugintest.UnmountAll(t, root) })
	dir := filepath.Join(root, "pods", "a", "volumes", "kubernetes.io~local-volume", "pv-1")
	if _, err := p.SetUp(context.Background(), pvSpec(dev), dir); err == nil {
		t.Fatal("SetUp of a partitioned device succeeded")
	}
	if out, _ := exec.Command("blkid", "-p", "-o", "value", "-s", "TYPE", dev).Output(); strings.TrimSpace(string(out)) != "" {
		t.Fatalf("the partitioned device was formatted: %q", out)
	}
}
