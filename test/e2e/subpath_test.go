package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/subpath/subpathtest"
)

// subPathPod has an emptyDir, a hostPath and a configMap volume used with
// subPath and subPathExpr by an init and a regular container.
const subPathPod = `
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: prod}
spec:
  initContainers:
  - name: init
    image: busybox
    volumeMounts:
    - {name: scratch, mountPath: /s, subPath: made/by/agent}
  containers:
  - name: app
    image: busybox
    env:
    - name: POD
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - {name: DIR, value: "logs-$(POD)"}
    volumeMounts:
    - {name: scratch, mountPath: /all}
    - {name: host, mountPath: /etc/app.conf, subPath: config/app.conf}
    - {name: host, mountPath: /data, subPathExpr: "$(DIR)/out"}
    - {name: config, mountPath: /etc/other.conf, subPath: other.conf}
  volumes:
  - {name: scratch, emptyDir: {}}
  - {name: host, hostPath: {path: %q, type: Directory}}
  - {name: config, configMap: {name: app}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: app, namespace: prod}
data: {other.conf: "from the configMap"}
`

// subPathsOf returns the subPath mounts /v1/pods lists for volume.
func subPathsOf(p apiPod, volume string) []apiSubPath { return p.volume(volume).SubPaths }

// mountIDs maps the mount points of mountinfo to their mount IDs.
func mountIDs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range readMountinfo(t) {
		out[m.point] = m.id
	}
	return out
}

// TestSubPathMountsContentRestartAndCleanup: with --root-dir reached
// through a symlink, the subPath mounts of an init and a regular
// container (a directory the agent makes, a file, a subPathExpr from the
// downward API, a configMap's key) are prepared where /v1/pods says, show the volume's
// content and lie inside their volume; a SIGKILL and restart remounts
// none of them; deleting the pod leaves no mount and no directory, and
// the hostPath's data untouched. A pod deleted while the agent is down
// is cleaned up after a SIGKILL and restart.
func TestSubPathMountsContentRestartAndCleanup(t *testing.T) {
	a := newAgent(t)
	symlinkedRoot(t, a)
	host := t.TempDir()
	plugintest.WriteFile(t, filepath.Join(host, "config/app.conf"), "setting=1")
	a.writeManifest("pod.yaml", fmt.Sprintf(subPathPod, host))
	a.start()
	p := a.waitPod("prod", "web", 15*time.Second, ready)
	byContainer := map[string]apiSubPath{}
	for _, v := range []string{"scratch", "host", "config"} {
		for _, s := range subPathsOf(p, v) {
			if s.Error != "" || s.Path == "" {
				t.Fatalf("volume %s: %+v", v, s)
			}
			if err := subpathtest.Inside(s.Path, p.volume(v).Path); err != nil {
				t.Error(err)
			}
			byContainer[fmt.Sprintf("%s/%d", s.Container, s.Index)] = s
		}
	}
	want := map[string]string{"init/0": "made/by/agent", "app/1": "config/app.conf", "app/2": "logs-web/out", "app/3": "other.conf"}
	if len(byContainer) != len(want) {
		t.Fatalf("subPaths %+v, want %v", byContainer, want)
	}
	volumeOf := map[string]string{"init/0": "scratch", "app/1": "host", "app/2": "host", "app/3": "config"}
	for k, sub := range want {
		s := byContainer[k]
		if s.SubPath != sub || !strings.HasSuffix(s.Path, "/volume-subpaths/"+volumeOf[k]+"/"+k) {
			t.Errorf("%s: %+v, want subPath %s at volume-subpaths/<volume>/%s", k, s, sub, k)
		}
	}
	if got := plugintest.ReadFile(t, byContainer["app/1"].Path); got != "setting=1" {
		t.Errorf("the file subPath shows %q", got)
	}
	// A configMap's key is a link into its ..data directory: followed,
	// as it stays inside the volume.
	if got := plugintest.ReadFile(t, byContainer["app/3"].Path); got != "from the configMap" {
		t.Errorf("the configMap key's subPath shows %q", got)
	}
	plugintest.WriteFile(t, filepath.Join(host, "logs-web/out/x"), "written by the pod")
	if got := plugintest.ReadFile(t, filepath.Join(byContainer["app/2"].Path, "x")); got != "written by the pod" {
		t.Errorf("the subPathExpr mount shows %q", got)
	}
	if fi, err := os.Stat(filepath.Join(p.volume("scratch").Path, "made/by/agent")); err != nil || !fi.IsDir() {
		t.Errorf("the missing subPath was not made a directory: %v", err)
	}

	before := mountIDs(t)
	a.restart(true)
	a.waitPod("prod", "web", 15*time.Second, ready)
	waitFor(t, 10*time.Second, "the set-ups after the restart", func() (bool, string) {
		return strings.Count(a.logs.String(), `"msg":"subPath mount prepared"`) >= 4, tail(a.logs.String(), 5)
	})
	if !strings.Contains(a.logs.String(), `"subPathMounts":4`) {
		t.Errorf("the restart did not report the 4 subPath mounts it found: %s", tail(a.logs.String(), 20))
	}
	after := mountIDs(t)
	for _, s := range byContainer {
		if before[s.Path] == "" || after[s.Path] != before[s.Path] {
			t.Errorf("%s: mount ID %q before the restart, %q after: remounted", s.Path, before[s.Path], after[s.Path])
		}
	}

	a.removeManifest("pod.yaml")
	a.waitPodDirGone(p.UID)
	if m := mountsUnder(t, a.resolvedRoot()); len(m) != 0 {
		t.Errorf("mounts left after teardown: %v", m)
	}
	if got := plugintest.ReadFile(t, filepath.Join(host, "logs-web/out/x")); got != "written by the pod" {
		t.Errorf("the hostPath's data after teardown: %q", got)
	}

	// Deleted while the agent is down: cleaned up at the next start.
	a.writeManifest("pod.yaml", fmt.Sprintf(subPathPod, host))
	p = a.waitPod("prod", "web", 15*time.Second, ready)
	deleteWhileKilled(t, a, "pod.yaml", p.UID)
}

// TestSubPathRefusals: a subPath through a symlink a pod planted to a
// host directory, and one with "..", fail their volume (still set up,
// the other subPaths prepared) with an error naming the pod's
// container, mount and path, mount nothing outside, and hold the pod
// back; the planted link replaced by a directory, the mount follows. The
// pod deleted while the agent is down (SIGKILL), its mounts go at the
// next start.
func TestSubPathRefusals(t *testing.T) {
	a := newAgent(t)
	outside, before := outsideTree(t)
	host := t.TempDir()
	plugintest.WriteFile(t, filepath.Join(host, "fine/file"), "pod data")
	if err := os.Symlink(outside, filepath.Join(host, "escape")); err != nil {
		t.Fatal(err)
	}
	a.writeManifest("pod.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: sneaky}
spec:
  containers:
  - name: c
    image: busybox
    volumeMounts:
    - {name: host, mountPath: /a, subPath: fine}
    - {name: host, mountPath: /b, subPath: escape/sub}
  - name: d
    image: busybox
    volumeMounts:
    - {name: host, mountPath: /c, subPath: ../../etc}
  volumes:
  - {name: host, hostPath: {path: %q}}
`, host))
	a.start()
	p := a.waitPod("default", "sneaky", 15*time.Second, func(p apiPod) bool {
		s := subPathsOf(p, "host")
		return len(s) == 3 && s[1].Error != ""
	})
	v := p.volume("host")
	if p.Ready || v.State != "Failed" || v.Path != host {
		t.Errorf("pod ready=%v, volume %+v: want the pod held back and the volume Failed at %s", p.Ready, v, host)
	}
	s := v.SubPaths
	if s[0].Path == "" || s[0].Error != "" {
		t.Errorf("the good subPath: %+v", s[0])
	}
	for _, want := range []string{`subPath "escape/sub"`, `container "c"`, "volumeMount 1", "symlink"} {
		if !strings.Contains(s[1].Error, want) || !strings.Contains(v.Error+s[1].Error, want) {
			t.Errorf("refusal %q does not say %s", s[1].Error, want)
		}
	}
	for _, want := range []string{`"../../etc"`, `container "d"`, "volumeMount 0", "'..'"} {
		if !strings.Contains(s[2].Error, want) {
			t.Errorf("refusal %q does not say %s", s[2].Error, want)
		}
	}
	checkSubPathMounts(t, a, host)
	checkOutside(t, outside, before)

	if err := os.Remove(filepath.Join(host, "escape")); err != nil {
		t.Fatal(err)
	}
	plugintest.WriteFile(t, filepath.Join(host, "escape/sub/file"), "now inside")
	p = a.waitPod("default", "sneaky", 15*time.Second, func(p apiPod) bool { return subPathsOf(p, "host")[1].Path != "" })
	if got := plugintest.ReadFile(t, filepath.Join(subPathsOf(p, "host")[1].Path, "file")); got != "now inside" {
		t.Errorf("the subPath once a directory shows %q", got)
	}
	checkSubPathMounts(t, a, host)

	// Deleted while the agent is down: the pod has no volume directory
	// (hostPath has none), only its subPath mounts, found at the next
	// start with the pod's directory and removed with it.
	deleteWhileKilled(t, a, "pod.yaml", p.UID)
	checkOutside(t, outside, before)
}

// checkSubPathMounts fails unless every mount below the agent's
// volume-subpaths directories lies inside the volume at dir, as the
// kernel's mount table shows it.
func checkSubPathMounts(t *testing.T, a *agent, dir string) int {
	t.Helper()
	n := 0
	for _, m := range mountsUnder(t, a.resolvedRoot()) {
		if !strings.Contains(m, "/volume-subpaths/") {
			continue
		}
		n++
		if err := subpathtest.Inside(m, dir); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// TestCVE2021_25741_SubPathSwapRaceInTheAgent: CVE-2021-25741 was a
// container swapping a checked subPath directory for a symlink between
// the kubelet's check and its mount. Here a racer swaps a directory of
// the subPaths of pod after pod (eight containers each, a subPath through
// the directory and one of it) for a symlink to the host without pause,
// while the agent prepares them and tries again after each refusal; a
// watcher reads the kernel's mount table all along. No mount the agent
// makes ever shows anything outside the volume, the host is unchanged,
// and each pod's teardown leaves nothing.
func TestCVE2021_25741_SubPathSwapRaceInTheAgent(t *testing.T) {
	a := newAgent(t)
	outside, before := outsideTree(t)
	host := t.TempDir()
	a.start()
	stopRacer := slowSwapRacer(t, host, outside)
	defer stopRacer()
	stopWatch := watchSubPathMounts(t, a, host)
	var containers strings.Builder
	for i := range 8 {
		fmt.Fprintf(&containers, "  - {name: c%d, image: busybox, volumeMounts: [{name: host, mountPath: /a, subPath: victim/d%d}, {name: host, mountPath: /b, subPath: victim}]}\n", i, i%4)
	}
	const rounds = 10
	prepared, refused := 0, 0
	for r := range rounds {
		name := fmt.Sprintf("race-%d", r)
		a.writeManifest(name+".yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  containers:
%s  volumes:
  - {name: host, hostPath: {path: %q}}
`, name, containers.String(), host))
		p := a.waitPod("default", name, 20*time.Second, func(p apiPod) bool {
			for _, s := range subPathsOf(p, "host") {
				if s.Path == "" && s.Error == "" {
					return false
				}
			}
			return len(subPathsOf(p, "host")) == 16
		})
		for _, s := range subPathsOf(p, "host") {
			if s.Path == "" {
				refused++
				continue
			}
			prepared++
			if _, err := os.Stat(filepath.Join(s.Path, "passwd")); err == nil {
				t.Fatalf("round %d: %s shows the host directory", r, s.Path)
			}
		}
		checkSubPathMounts(t, a, host)
		a.removeManifest(name + ".yaml")
		a.waitPodDirGone(p.UID)
	}
	seen := stopWatch()
	refusals := strings.Count(a.logs.String(), "subPath mount refused")
	if n := stopRacer(); n == 0 || prepared == 0 || refusals == 0 {
		t.Fatalf("%d swaps, %d subPaths prepared, %d refused: the race never ran", n, prepared, refusals)
	}
	t.Logf("%d subPaths prepared, %d refused at their last try, %d refusals on the way, %d mounts seen by the watcher",
		prepared, refused, refusals, seen)
	if m := mountsUnder(t, a.resolvedRoot()); len(m) != 0 {
		t.Errorf("mounts left: %v", m)
	}
	checkOutside(t, outside, before)
}

// watchSubPathMounts checks, until stopped, every subPath mount the
// agent has in the kernel's mount table: each must lie inside the volume
// at dir. stop returns how many mounts it checked.
func watchSubPathMounts(t *testing.T, a *agent, dir string) (stop func() int) {
	t.Helper()
	root := a.resolvedRoot()
	done, finished := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-done:
				finished <- n
				return
			case <-time.After(2 * time.Millisecond):
			}
			raw, err := os.ReadFile("/proc/self/mountinfo")
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(raw), "\n") {
				f := strings.Fields(line)
				if len(f) < 5 || !strings.HasPrefix(f[4], root+"/") || !strings.Contains(f[4], "/volume-subpaths/") {
					continue
				}
				n++
				if err := subpathtest.Inside(f[4], dir); err != nil && !errors.Is(err, subpathtest.ErrNotMounted) {
					t.Errorf("watcher: %v", err)
				}
			}
		}
	}()
	var n int
	var once sync.Once
	return func() int {
		once.Do(func() { close(done); n = <-finished })
		return n
	}
}

// slowSwapRacer is swapRacer holding each state for a moment (the
// directory longer than the symlink), so that the agent's walks meet
// both many times; each swap is
// one atomic exchange (renameat2 RENAME_EXCHANGE), so that the directory
// is never missing (the agent would make it anew).
func slowSwapRacer(t *testing.T, dir, target string) (stop func() int) {
	t.Helper()
	victim, link := filepath.Join(dir, "victim"), filepath.Join(dir, "victim.link")
	for i := range 8 {
		plugintest.WriteFile(t, filepath.Join(victim, fmt.Sprintf("d%d", i%4), fmt.Sprintf("f%d", i)), "pod data")
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	exchange := func() error { return unix.Renameat2(unix.AT_FDCWD, victim, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE) }
	var swaps atomic.Int64
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			default:
			}
			if exchange() != nil {
				return
			}
			swaps.Add(1)
			time.Sleep(100 * time.Microsecond)
			if exchange() != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	var once sync.Once
	return func() int {
		once.Do(func() { close(done); <-finished })
		return int(swaps.Load())
	}
}

// deleteWhileKilled SIGKILLs the agent, removes the pod's manifest while
// it is down, starts it again and waits until the pod's directory is
// gone, with no mount left below the root.
// keepManifest is an object of no consequence that keeps a manifest
// directory from being empty.
const keepManifest = `
apiVersion: v1
kind: ConfigMap
metadata: {name: keep}
data: {k: v}
`

func deleteWhileKilled(t *testing.T, a *agent, manifest, uid string) {
	t.Helper()
	a.kill()
	a.removeManifest(manifest)
	// The directory lists something else, as a node's does: an empty one
	// would be no evidence that the pod is gone (it would be Held).
	a.writeManifest("keep.yaml", keepManifest)
	a.start(a.extra...)
	a.waitPodDirGone(uid)
	if m := mountsUnder(t, a.resolvedRoot()); len(m) != 0 {
		t.Errorf("mounts left after a SIGKILL and restart: %v", m)
	}
}
