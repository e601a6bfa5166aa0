package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/ptr"
)

const noSwapPod = `
apiVersion: v1
kind: Pod
metadata: {name: noswap}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: creds, secret: {secretName: creds}}
  - {name: all, projected: {sources: [{secret: {name: creds}}]}}
  - {name: cache, emptyDir: {medium: Memory}}
  - {name: disk, emptyDir: {}}
---
apiVersion: v1
kind: Secret
metadata: {name: creds}
stringData: {k: v}
`

// TestMemoryVolumesNeverReachSwap: on a kernel with tmpfs noswap, the
// secret, projected and Memory emptyDir volumes are mounted with it, as the
// mount table shows, and /v1/pods says so. A restart remounts nothing and
// still knows; a tmpfs without noswap found at start (mounted by an older
// agent) is kept as it is and reported.
func TestMemoryVolumesNeverReachSwap(t *testing.T) {
	a := newAgent(t)
	needNoSwap(t)
	a.writeManifest("pod.yaml", noSwapPod)
	a.start()
	p := a.waitPod("default", "noswap", 10*time.Second, ready)
	memory := []string{"creds", "all", "cache"}
	ids := map[string]string{}
	for _, name := range memory {
		m := mountAt(t, p.volume(name).Path)
		if m.fstype != "tmpfs" || !slices.Contains(strings.Split(m.superOpts, ","), "noswap") {
			t.Errorf("volume %s: mount %+v, want a tmpfs with noswap in its super options", name, m)
		}
		ids[name] = m.id
	}
	checkNoSwap(t, p, map[string]*bool{"creds": ptr.To(true), "all": ptr.To(true), "cache": ptr.To(true), "disk": nil})
	if !strings.Contains(a.logs.String(), "memory-backed volumes are mounted with noswap") {
		t.Error("the agent does not log that it uses noswap")
	}

	// An older agent mounted the emptyDir without noswap.
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	cache := p.volume("cache").Path
	if err := unix.Unmount(cache, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", cache, "tmpfs", 0, "mode=0777"); err != nil {
		t.Fatal(err)
	}
	ids["cache"] = mountAt(t, cache).id
	a.start(a.extra...)
	p = a.waitPod("default", "noswap", 10*time.Second, func(p apiPod) bool {
		return ready(p) && p.volume("cache").NoSwap != nil
	})
	checkNoSwap(t, p, map[string]*bool{"creds": ptr.To(true), "all": ptr.To(true), "cache": ptr.To(false), "disk": nil})
	for _, name := range memory {
		if id := mountAt(t, p.volume(name).Path).id; id != ids[name] {
			t.Errorf("volume %s was mounted again at the restart (mount ID %s, was %s)", name, id, ids[name])
		}
	}
}

// needNoSwap skips t unless this kernel mounts a tmpfs with noswap.
func needNoSwap(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4k,noswap"); err != nil {
		t.Skipf("this kernel cannot mount a tmpfs with noswap (Linux 6.4 or later needed): %v", err)
	}
	if err := unix.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
}

// mountAt returns the mount table's entry whose mount point is path.
func mountAt(t *testing.T, path string) mountEntry {
	t.Helper()
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	var found mountEntry
	for _, m := range readMountinfo(t) {
		if m.point == resolved {
			found = m // the last one is on top
		}
	}
	if found.point == "" {
		t.Fatalf("nothing is mounted at %s", resolved)
	}
	return found
}

func checkNoSwap(t *testing.T, p apiPod, want map[string]*bool) {
	t.Helper()
	for name, w := range want {
		if got := p.volume(name).NoSwap; show(got) != show(w) {
			t.Errorf("volume %s: noSwap %s in /v1/pods, want %s", name, show(got), show(w))
		}
	}
}

func show(b *bool) string {
	if b == nil {
		return "absent"
	}
	return fmt.Sprint(*b)
}
