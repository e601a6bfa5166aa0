package plugintest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Case is one plugin and one volume for Conformance.
type Case struct {
	// Plugin is the plugin under test, built on Mounter.
	Plugin volume.Plugin
	// Mounter is the mounter Plugin uses: a *mount.Fake (mounts are counted
	// in its log) or, as root, mount.System (mounts are real and counted in
	// the kernel's mount table; the nested mount check runs only then).
	Mounter mount.Mounter
	// Spec is a volume that sets up successfully.
	Spec *volume.Spec
	// Tmpfs says SetUp mounts a tmpfs on the volume directory.
	Tmpfs bool
	// Source, when set, says SetUp mounts Source (a local PV's directory,
	// an NFS export) on the volume directory: what the pod writes lands
	// there, and must survive every teardown unchanged. Such a case runs on
	// mount.System only: a fake mount does not carry the writes.
	Source string
	// NoDir says the plugin keeps no volume directory (hostPath): SetUp
	// reports a path outside dir, which must survive everything unchanged.
	NoDir bool
	// CheckContent, when set, checks the content at the path SetUp reported.
	CheckContent func(t *testing.T, path string)
	// Failing, when set, returns a plugin and a spec whose SetUp fails (a
	// mounter with MountErr, a missing ConfigMap).
	Failing func() (volume.Plugin, *volume.Spec)
}

// Conformance checks that c's plugin keeps the volume.Plugin contract on
// the real file system: SetUp is idempotent, TearDown removes everything it
// owns and nothing else, and a failed SetUp leaves no trace.
func Conformance(t *testing.T, c Case) {
	if _, real := c.Mounter.(mount.System); c.Source != "" && !real {
		t.Skip("the case mounts a source: it needs mount.System")
	}
	t.Run("SetUpTwice", func(t *testing.T) { setUpTwice(t, c) })
	t.Run("TearDown", func(t *testing.T) { tearDown(t, c) })
	t.Run("TearDownKeepsSymlinkTargets", func(t *testing.T) { symlinks(t, c) })
	t.Run("TearDownStopsAtNestedMount", func(t *testing.T) { nestedMount(t, c) })
	t.Run("FailedSetUp", func(t *testing.T) { failedSetUp(t, c) })
}

func setUpTwice(t *testing.T, c Case) {
	dir := VolumeDir(t)
	path := setUp(t, c, c.Plugin, c.Spec, dir)
	mounts := mountCalls(t, c.Mounter, dir)
	wantMounts := 0
	if c.mounts() {
		wantMounts = 1
	}
	if mounts != wantMounts {
		t.Errorf("SetUp: %d mounts on %s, want %d", mounts, dir, wantMounts)
	}
	if !c.NoDir {
		WriteFile(t, filepath.Join(dir, "written-by-pod"), "pod data")
	}
	before := Tree(t, path)
	if again := setUp(t, c, c.Plugin, c.Spec, dir); again != path {
		t.Errorf("second SetUp path = %s, want %s", again, path)
	}
	if n := mountCalls(t, c.Mounter, dir); n != mounts {
		t.Errorf("second SetUp: %d mounts on %s, want %d (no second mount)", n, dir, mounts)
	}
	checkUnchanged(t, "second SetUp", before, Tree(t, path))
	mustTearDown(t, c, dir)
}

func tearDown(t *testing.T, c Case) {
	dir := VolumeDir(t)
	path := setUp(t, c, c.Plugin, c.Spec, dir)
	if c.Source != "" {
		WriteFile(t, filepath.Join(path, "written-by-pod"), "pod data")
		path = c.Source
	}
	before := Tree(t, path)
	mustTearDown(t, c, dir)
	if c.NoDir || c.Source != "" {
		checkUnchanged(t, "TearDown", before, Tree(t, path))
	}
	if err := c.Plugin.TearDown(context.Background(), dir); err != nil {
		t.Errorf("TearDown of a missing directory: %v", err)
	}
	setUp(t, c, c.Plugin, c.Spec, dir)
	mustTearDown(t, c, dir)
}

func symlinks(t *testing.T, c Case) {
	outside := t.TempDir()
	precious := filepath.Join(outside, "precious")
	WriteFile(t, precious, "keep")
	dir := VolumeDir(t)
	path := setUp(t, c, c.Plugin, c.Spec, dir)
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		t.Skipf("%s is not a directory to plant symlinks in", path)
	}
	for name, target := range map[string]string{"evil": outside, "evil-file": precious} {
		if err := os.Symlink(target, filepath.Join(path, name)); err != nil {
			t.Fatal(err)
		}
	}
	before := Tree(t, path)
	mustTearDown(t, c, dir)
	if got := ReadFile(t, precious); got != "keep" {
		t.Errorf("file behind a planted symlink = %q, want %q", got, "keep")
	}
	if c.NoDir {
		checkUnchanged(t, "TearDown", before, Tree(t, path))
	}
}

func nestedMount(t *testing.T, c Case) {
	NeedRoot(t, "bind-mounts a directory into the volume")
	if _, ok := c.Mounter.(mount.System); !ok || c.NoDir {
		t.Skip("needs a plugin on mount.System with a volume directory")
	}
	ctx := context.Background()
	dir := VolumeDir(t)
	setUp(t, c, c.Plugin, c.Spec, dir)
	src := t.TempDir()
	WriteFile(t, filepath.Join(src, "precious"), "keep")
	nested := filepath.Join(dir, "nested")
	if err := os.Mkdir(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := (mount.System{}).Mount(ctx, mount.Mount{Type: "none", Source: src, Options: []string{"bind"}}, nested); err != nil {
		t.Fatal(err)
	}
	if err := c.Plugin.TearDown(ctx, dir); err == nil {
		t.Error("TearDown of a volume with a mount nested inside succeeded, want an error")
	}
	if got := ReadFile(t, filepath.Join(src, "precious")); got != "keep" {
		t.Errorf("file behind the nested mount = %q, want %q", got, "keep")
	}
	if err := (mount.System{}).Unmount(ctx, nested); err != nil {
		t.Fatal(err)
	}
	mustTearDown(t, c, dir)
}

func failedSetUp(t *testing.T, c Case) {
	if c.Failing == nil {
		t.Skip("the case has no failing set-up")
	}
	ctx := context.Background()
	p, spec := c.Failing()
	dir := VolumeDir(t)
	if _, err := p.SetUp(ctx, spec, dir); err == nil {
		t.Fatal("failing SetUp succeeded")
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed SetUp left %s behind (lstat: %v)", dir, err)
	}
	if os.Geteuid() == 0 && len(Mounts(t, filepath.Dir(dir))) > 0 {
		t.Errorf("failed SetUp left a mount below %s", filepath.Dir(dir))
	}
	dir = VolumeDir(t)
	path := setUp(t, c, c.Plugin, c.Spec, dir)
	before := Tree(t, path)
	// A mount that is in place and alive is kept: SetUp of a mounted
	// volume only checks it, so the failing spec may well succeed there;
	// either way nothing may change.
	if _, err := p.SetUp(ctx, spec, dir); err == nil && c.Source == "" {
		t.Fatal("failing SetUp on a set-up volume succeeded")
	}
	checkUnchanged(t, "failed SetUp", before, Tree(t, path))
	checkSetUp(t, c, dir, path)
	mustTearDown(t, c, dir)
}

// setUp sets spec up in dir with p and checks the outcome against c.
func setUp(t *testing.T, c Case, p volume.Plugin, spec *volume.Spec, dir string) string {
	t.Helper()
	res, err := p.SetUp(context.Background(), spec, dir)
	if err != nil {
		t.Fatalf("SetUp: %v", err)
	}
	checkSetUp(t, c, dir, res.Path)
	return res.Path
}

func checkSetUp(t *testing.T, c Case, dir, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("SetUp reported path %s: %v", path, err)
	}
	if c.NoDir {
		if path == dir {
			t.Errorf("SetUp reported the volume directory, want a path outside it")
		}
	} else {
		checkVolumeDir(t, c, dir, path)
	}
	if c.CheckContent != nil {
		c.CheckContent(t, path)
	}
}

func checkVolumeDir(t *testing.T, c Case, dir, path string) {
	t.Helper()
	if path != dir {
		t.Errorf("SetUp path = %s, want the volume directory %s", path, dir)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("volume directory %s: %v, want a directory", dir, err)
	}
	mounted, err := c.Mounter.IsMountPoint(context.Background(), dir)
	if err != nil || mounted != c.mounts() {
		t.Errorf("IsMountPoint(%s) = %v, %v; want %v", dir, mounted, err, c.mounts())
	}
	if _, real := c.Mounter.(mount.System); real && c.Tmpfs {
		var types []string
		for _, info := range Mounts(t, dir) {
			types = append(types, info.FSType)
		}
		if !slices.Equal(types, []string{"tmpfs"}) {
			t.Errorf("file systems mounted at %s = %q, want one tmpfs", dir, types)
		}
	}
}

// mounts says SetUp mounts something on the volume directory.
func (c Case) mounts() bool { return c.Tmpfs || c.Source != "" }

// mustTearDown tears dir down and checks that nothing of it is left.
func mustTearDown(t *testing.T, c Case, dir string) {
	t.Helper()
	ctx := context.Background()
	if err := c.Plugin.TearDown(ctx, dir); err != nil {
		t.Fatalf("TearDown: %v", err)
	}
	if c.NoDir {
		return
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("TearDown left %s (lstat: %v)", dir, err)
	}
	if mounts, err := c.Mounter.MountsUnder(ctx, dir); err != nil || len(mounts) > 0 {
		t.Errorf("after TearDown, mounts under %s = %v, %v; want none", dir, mounts, err)
	}
}

func checkUnchanged(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	if maps.Equal(before, after) {
		return
	}
	paths := map[string]string{}
	maps.Copy(paths, before)
	maps.Copy(paths, after)
	var diff []string
	for _, p := range slices.Sorted(maps.Keys(paths)) {
		if before[p] != after[p] {
			diff = append(diff, fmt.Sprintf("%s: %q -> %q", p, before[p], after[p]))
		}
	}
	t.Errorf("%s changed the volume:\n%v", what, diff)
}
