package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// claimVol is one persistentVolumeClaim volume of a pod.
type claimVol struct {
	name, claim string
	readOnly    bool
}

// claimsPod is a pod with the given claim volumes, in that order.
func claimsPod(name string, vols ...claimVol) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec:\n  containers: [{name: c, image: busybox}]\n  volumes:\n", name)
	for _, v := range vols {
		fmt.Fprintf(&b, "  - {name: %s, persistentVolumeClaim: {claimName: %s, readOnly: %t}}\n", v.name, v.claim, v.readOnly)
	}
	return b.String()
}

// namedClaim is dataClaim under another name.
func namedClaim(name string) string {
	return strings.Replace(dataClaim, "name: data", "name: "+name, 1)
}

// readOnlyMount reports whether path is on a read-only mount.
func readOnlyMount(t *testing.T, path string) bool {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatalf("statfs %s: %v", path, err)
	}
	return st.Flags&unix.ST_RDONLY != 0
}

// checkNotWritable fails unless path is a read-only mount into which a
// file cannot be written.
func checkNotWritable(t *testing.T, path string) {
	t.Helper()
	if !readOnlyMount(t, path) {
		t.Fatalf("%s is a writable mount", path)
	}
	err := os.WriteFile(filepath.Join(path, "written"), []byte("x"), 0o644)
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("writing into %s: %v, want EROFS", path, err)
	}
}

// TestClaimUsedTwiceReadOnlyAndNot: a pod that uses one claim in two
// volumes, one of them readOnly, must never be shown with a writable path
// for the readOnly volume: one PersistentVolume is mounted once per pod, so
// both volumes fail with an error that names them, the claim and why —
// for a new pod, for a running pod edited to add the readOnly volume first
// (its read-write mount stays, shown for neither), and after SIGTERM and
// SIGKILL restarts. A claim used twice with the same readOnly still works,
// both volumes at one path, read-only when asked.
func TestClaimUsedTwiceReadOnlyAndNot(t *testing.T) {
	a := newAgent(t)
	var pvs, claims []string
	for _, name := range []string{"data", "logs", "cache", "scratch"} {
		pvs = append(pvs, fmt.Sprintf(localPV, "pv-"+name, "1Gi", disk(t, name)))
		claims = append(claims, withSpecField(namedClaim(name), "volumeName: pv-"+name))
	}
	a.writeManifest("pvs.yaml", strings.Join(pvs, "---"))
	a.writeManifest("claims.yaml", strings.Join(claims, "---"))
	a.writeManifest("fresh.yaml", claimsPod("fresh", claimVol{"a", "data", false}, claimVol{"b", "data", true}))
	a.writeManifest("edited.yaml", claimsPod("edited", claimVol{"a", "logs", false}))
	a.writeManifest("twice.yaml", claimsPod("twice-ro", claimVol{"first", "cache", true}, claimVol{"second", "cache", true})+"---\n"+
		claimsPod("twice-rw", claimVol{"first", "scratch", false}, claimVol{"second", "scratch", false}))
	a.start()

	// The same claim twice with the same readOnly: both volumes at one
	// path, as before.
	ro := a.waitPod("default", "twice-ro", 10*time.Second, ready)
	if x, y := ro.volume("first"), ro.volume("second"); x.Path == "" || x.Path != y.Path || x.PV != "pv-cache" {
		t.Fatalf("twice-ro volumes %+v and %+v; want both at pv-cache's path", x, y)
	}
	checkNotWritable(t, ro.volume("second").Path)
	rw := a.waitPod("default", "twice-rw", 10*time.Second, ready)
	if x, y := rw.volume("first"), rw.volume("second"); x.Path == "" || x.Path != y.Path {
		t.Fatalf("twice-rw volumes %+v and %+v; want both at one path", x, y)
	}
	if err := os.WriteFile(filepath.Join(rw.volume("second").Path, "through-second"), []byte("second"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(rw.volume("first").Path, "through-second"), "second")

	// A running pod with a read-write mount of logs' PV is edited to use
	// the claim a second time, readOnly, in a volume listed first.
	edited := a.waitPod("default", "edited", 10*time.Second, ready)
	rwMount := edited.volume("a").Path
	if rwMount == "" || readOnlyMount(t, rwMount) {
		t.Fatalf("edited: volume a = %+v; want a writable mount", edited.volume("a"))
	}
	a.writeManifest("edited.yaml", claimsPod("edited", claimVol{"b", "logs", true}, claimVol{"a", "logs", false}))

	// Whatever the agent goes through, a readOnly volume is shown at no
	// writable mount; the pods of both conflicts fail, and those of one
	// claim used twice alike stay ready.
	readOnlyVolumes := map[string][]string{"fresh": {"b"}, "edited": {"b"}, "twice-ro": {"first", "second"}}
	settled := func(pods map[string]apiPod) bool {
		for pod, claim := range map[string]string{"fresh": "data", "edited": "logs"} {
			for _, name := range []string{"a", "b"} {
				v := pods[pod].volume(name)
				if v.State != "Failed" || v.Path != "" || !conflictError(v.Error, claim) || pods[pod].Ready {
					return false
				}
			}
		}
		return pods["twice-ro"].Ready && pods["twice-rw"].Ready
	}
	for round, restart := range []func(){func() {}, func() { a.restart(false) }, func() { a.restart(true) }} {
		restart()
		a.neverWritable(fmt.Sprintf("round %d", round), readOnlyVolumes, settled)
		if !isMountPoint(t, rwMount) {
			t.Fatalf("(round %d) the running pod's read-write mount %s was taken down", round, rwMount)
		}
	}
}

// conflictError reports whether msg names volumes a and b, the claim, and
// readOnly as the reason.
func conflictError(msg, claim string) bool {
	for _, s := range []string{`"a"`, `"b"`, "claim default/" + claim, "readOnly"} {
		if !strings.Contains(msg, s) {
			return false
		}
	}
	return true
}

// neverWritable polls /v1/pods until settled holds for 2 s on end, failing
// at once if a volume of readOnly (by pod name in namespace default) is
// ever shown with a path on a writable mount.
func (a *agent) neverWritable(what string, readOnly map[string][]string, settled func(map[string]apiPod) bool) {
	a.t.Helper()
	a.untilSettled(what, "the pods to settle", func(all []apiPod) bool {
		pods := map[string]apiPod{}
		for _, p := range all {
			if p.Namespace == "default" {
				pods[p.Name] = p
			}
		}
		for pod, names := range readOnly {
			for _, name := range names {
				if v := pods[pod].volume(name); v.Path != "" && !readOnlyMount(a.t, v.Path) {
					a.t.Fatalf("(%s) readOnly volume %s of pod %s shown at the writable mount %s: %+v", what, name, pod, v.Path, pods[pod])
				}
			}
		}
		return settled(pods)
	})
}

// untilSettled polls /v1/pods, hands every answer to check (which fails
// the test on what must never be seen) and returns once check has said
// settled for 2 s in a row; it fails after 15 s, waiting for waitingFor.
func (a *agent) untilSettled(what, waitingFor string, check func([]apiPod) bool) {
	a.t.Helper()
	var since time.Time
	deadline := time.Now().Add(15 * time.Second)
	for {
		pods := a.pods()
		switch {
		case !check(pods):
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) > 2*time.Second:
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("(%s) timed out waiting for %s; last: %+v", what, waitingFor, pods)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
