package emptydir_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/downwardapi"
	"github.com/volume-agent/volume-agent/internal/plugins/emptydir"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/volume"
)

func spec(src v1.EmptyDirVolumeSource, containers ...v1.Container) *volume.Spec {
	return &volume.Spec{
		Pod:    &v1.Pod{Spec: v1.PodSpec{Containers: containers}},
		Volume: &v1.Volume{Name: "cache", VolumeSource: v1.VolumeSource{EmptyDir: &src}},
	}
}

func TestValidateMedium(t *testing.T) {
	p := &emptydir.Plugin{}
	for medium, ok := range map[v1.StorageMedium]bool{
		v1.StorageMediumDefault:   true,
		v1.StorageMediumMemory:    true,
		v1.StorageMediumHugePages: false,
		"HugePages-2Mi":           false,
		"memory":                  false,
	} {
		err := p.Validate(spec(v1.EmptyDirVolumeSource{Medium: medium}))
		if (err == nil) != ok {
			t.Errorf("Validate(medium %q) = %v, want ok=%v", medium, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("%q", medium)) {
			t.Errorf("error %q does not name the medium %q", err, medium)
		}
	}
}

func TestSetUpPermissions(t *testing.T) {
	gid := int64(os.Getgid()) // a group a non-root user may chown to
	if os.Geteuid() == 0 {
		gid = 4321
	}
	for _, tc := range []struct {
		name     string
		fsGroup  *int64
		wantMode os.FileMode
		wantGID  uint32
	}{
		{"no fsGroup", nil, 0o777, uint32(os.Getgid())},
		{"fsGroup", &gid, os.ModeSetgid | 0o777, uint32(gid)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := spec(v1.EmptyDirVolumeSource{})
			s.Pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: tc.fsGroup}
			dir := plugintest.VolumeDir(t)
			if _, err := (&emptydir.Plugin{Mounter: &mount.Fake{}}).SetUp(context.Background(), s, dir); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode()&(os.ModePerm|os.ModeSetgid) != tc.wantMode {
				t.Errorf("mode = %v, want %v", fi.Mode(), tc.wantMode)
			}
			if got := fi.Sys().(*syscall.Stat_t).Gid; got != tc.wantGID {
				t.Errorf("group = %d, want %d", got, tc.wantGID)
			}
		})
	}
}

func limits(memory string) v1.Container {
	c := v1.Container{Name: "c" + memory}
	if memory != "" {
		c.Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse(memory)}
	}
	return c
}

// TestMemorySize checks the tmpfs size, as the kubelet computes it: the
// smallest of sizeLimit, the pod's memory limit and the node's allocatable
// memory, on the fake mounter and, as root, in the kernel.
func TestMemorySize(t *testing.T) {
	const nodeMiB = 256
	for _, tc := range []struct {
		name       string
		sizeLimit  string
		containers []v1.Container
		init       []v1.Container
		overhead   string
		wantMiB    int64
	}{
		{"sizeLimit only", "64Mi", nil, nil, "", 64},
		{"pod limit smaller", "64Mi", []v1.Container{limits("32Mi")}, nil, "", 32},
		{"sizeLimit smaller", "8Mi", []v1.Container{limits("32Mi")}, nil, "", 8},
		{"sum of containers", "", []v1.Container{limits("16Mi"), limits("8Mi")}, nil, "", 24},
		{"a container without limit", "128Mi", []v1.Container{limits("16Mi"), limits("")}, nil, "", 128},
		{"larger init container", "", []v1.Container{limits("16Mi")}, []v1.Container{limits("40Mi")}, "", 40},
		{"pod overhead", "", []v1.Container{limits("16Mi")}, nil, "4Mi", 20},
		{"no limit at all: the node's allocatable", "", []v1.Container{limits("")}, nil, "", nodeMiB},
		{"sizeLimit above the node's allocatable", "1Gi", nil, nil, "", nodeMiB},
		{"pod limit above the node's allocatable", "", []v1.Container{limits("1Gi")}, nil, "", nodeMiB},
		{"zero sizeLimit is no limit", "0", []v1.Container{limits("32Mi")}, nil, "", 32},
		{"zero pod limit is no limit", "64Mi", []v1.Container{limits("0")}, nil, "", 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}
			if tc.sizeLimit != "" {
				q := resource.MustParse(tc.sizeLimit)
				src.SizeLimit = &q
			}
			s := spec(src, tc.containers...)
			s.Pod.Spec.InitContainers = tc.init
			if tc.overhead != "" {
				s.Pod.Spec.Overhead = v1.ResourceList{v1.ResourceMemory: resource.MustParse(tc.overhead)}
			}
			s.Node = &v1.Node{Status: v1.NodeStatus{Allocatable: v1.ResourceList{v1.ResourceMemory: *resource.NewQuantity(nodeMiB<<20, resource.BinarySI)}}}
			wantOpt := fmt.Sprintf("size=%d", tc.wantMiB<<20)
			f := &mount.Fake{}
			dir := setUp(t, f, s)
			m, _ := f.Mounted(dir)
			if has := slices.Contains(m.Options, wantOpt); !has || m.Type != "tmpfs" {
				t.Errorf("mount = %v, want tmpfs with %s", m, wantOpt)
			}
			if os.Geteuid() != 0 {
				return
			}
			dir = setUp(t, mount.System{}, s)
			infos := plugintest.Mounts(t, dir)
			if len(infos) != 1 || infos[0].FSType != "tmpfs" {
				t.Fatalf("mounts at %s = %d, want one tmpfs", dir, len(infos))
			}
			wantKernel := fmt.Sprintf("size=%dk", tc.wantMiB<<10)
			if !slices.Contains(strings.Split(infos[0].VFSOptions, ","), wantKernel) {
				t.Errorf("super options %q, want %s", infos[0].VFSOptions, wantKernel)
			}
			if err := (&emptydir.Plugin{Mounter: mount.System{}}).TearDown(context.Background(), dir); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMemorySizeWithoutNode: a Memory emptyDir with neither sizeLimit nor
// a memory limit, from a source that knows no Node object (manifest mode),
// is sized to the machine's memory (MemTotal), not left to the kernel's
// default of half of it.
func TestMemorySizeWithoutNode(t *testing.T) {
	mem := downwardapi.MachineCapacity()[v1.ResourceMemory]
	if mem.Sign() <= 0 {
		t.Skip("no MemTotal in /proc/meminfo")
	}
	f := &mount.Fake{}
	dir := setUp(t, f, spec(v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}, limits("")))
	m, _ := f.Mounted(dir)
	if want := fmt.Sprintf("size=%d", mem.Value()); !slices.Contains(m.Options, want) {
		t.Errorf("mount options %q, want %s", m.Options, want)
	}
}

// TestMemoryNoSwap: the tmpfs of medium Memory has noswap when the kernel
// supports it, and the set-up says whether its pages may reach swap; on
// disk there is no tmpfs to say anything about.
func TestMemoryNoSwap(t *testing.T) {
	for _, tc := range []struct {
		name        string
		medium      v1.StorageMedium
		noSwap      bool
		wantOptions []string // nil: no mount
		wantSwap    volume.Swap
	}{
		{"memory, kernel with noswap", v1.StorageMediumMemory, true, []string{"mode=0777", "size=8388608", "noswap"}, volume.SwapNever},
		{"memory, kernel without noswap", v1.StorageMediumMemory, false, []string{"mode=0777", "size=8388608"}, volume.SwapAllowed},
		{"disk", v1.StorageMediumDefault, true, nil, volume.SwapUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size := resource.MustParse("8Mi")
			s := spec(v1.EmptyDirVolumeSource{Medium: tc.medium, SizeLimit: &size})
			f := &mount.Fake{}
			p := &emptydir.Plugin{Mounter: f, NoSwap: tc.noSwap}
			dir := plugintest.VolumeDir(t)
			res, err := p.SetUp(context.Background(), s, dir)
			if err != nil {
				t.Fatal(err)
			}
			m, mounted := f.Mounted(dir)
			if mounted != (tc.wantOptions != nil) || !slices.Equal(m.Options, tc.wantOptions) {
				t.Errorf("mount = %v (%v), want options %q", m, mounted, tc.wantOptions)
			}
			if res.Swap != tc.wantSwap {
				t.Errorf("swap = %v, want %v", res.Swap, tc.wantSwap)
			}
		})
	}
}

func TestMemoryNoSwapInTheKernel(t *testing.T) {
	plugintest.NeedNoSwap(t)
	p := &emptydir.Plugin{Mounter: mount.System{}, NoSwap: true}
	dir := plugintest.VolumeDir(t)
	t.Cleanup(func() { plugintest.UnmountAll(t, dir) })
	if _, err := p.SetUp(context.Background(), spec(v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}), dir); err != nil {
		t.Fatal(err)
	}
	infos := plugintest.Mounts(t, dir)
	if len(infos) != 1 || !slices.Contains(strings.Split(infos[0].VFSOptions, ","), "noswap") {
		t.Errorf("mounts at %s = %v, want one tmpfs with noswap in its super options", dir, infos)
	}
}

func setUp(t *testing.T, m mount.Mounter, s *volume.Spec) string {
	t.Helper()
	res, err := (&emptydir.Plugin{Mounter: m}).SetUp(context.Background(), s, plugintest.VolumeDir(t))
	if err != nil {
		t.Fatal(err)
	}
	return res.Path
}

func TestSetUpRollbackIsBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := &plugintest.TimedOutMounter{Fake: &mount.Fake{}, T: t, Cancel: cancel}
	dir := plugintest.VolumeDir(t)
	_, err := (&emptydir.Plugin{Mounter: m}).SetUp(ctx, spec(v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}), dir)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("SetUp = %v, want the mount's context.Canceled", err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the directory SetUp created was not rolled back: Lstat = %v", err)
	}
}

// TestMediumCannotChange: switching an existing volume's medium would hide
// its data under a tmpfs, or silently keep the tmpfs.
func TestMediumCannotChange(t *testing.T) {
	ctx := context.Background()
	m := &mount.Fake{}
	p := &emptydir.Plugin{Mounter: m}
	dir := plugintest.VolumeDir(t)
	if _, err := p.SetUp(ctx, spec(v1.EmptyDirVolumeSource{}), dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/db", []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := p.SetUp(ctx, spec(v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}), dir)
	if err == nil || !strings.Contains(err.Error(), "cannot change medium") {
		t.Fatalf("disk → Memory with data: %v, want a refusal", err)
	}
	if _, mounted := m.Mounted(dir); mounted {
		t.Fatal("a tmpfs was mounted over data on disk")
	}
	if got, _ := os.ReadFile(dir + "/db"); string(got) != "precious" {
		t.Fatalf("data = %q after the refused change", got)
	}

	memDir := plugintest.VolumeDir(t)
	if _, err := p.SetUp(ctx, spec(v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}), memDir); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SetUp(ctx, spec(v1.EmptyDirVolumeSource{}), memDir); err == nil || !strings.Contains(err.Error(), "is a tmpfs") {
		t.Fatalf("Memory → disk: %v, want a refusal", err)
	}
	if _, mounted := m.Mounted(memDir); !mounted {
		t.Fatal("the tmpfs of a refused change was unmounted")
	}
	// An empty disk volume may become Memory: nothing is hidden.
	emptyDir := plugintest.VolumeDir(t)
	if _, err := p.SetUp(ctx, spec(v1.EmptyDirVolumeSource{}), emptyDir); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SetUp(ctx, spec(v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}), emptyDir); err != nil {
		t.Fatalf("empty disk → Memory: %v", err)
	}
}
