package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
)

// localPV is a local PersistentVolume of size at path, on node-1.
const localPV = `
apiVersion: v1
kind: PersistentVolume
metadata: {name: %[1]s}
spec:
  capacity: {storage: %[2]s}
  accessModes: [ReadWriteOnce]
  storageClassName: local
  local: {path: %[3]s}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [node-1]}]
`

const dataClaim = `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  storageClassName: local
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
`

const claimPod = `
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  containers: [{name: c, image: busybox}]
  volumes: [{name: store, persistentVolumeClaim: {claimName: data}}]
`

// apiClaim is a claim as served by /v1/claims.
type apiClaim struct {
	Namespace, Name, Phase, PV, Error string
	ReclaimPolicy, Capacity           string
	LimitNotEnforced                  string
	PendingDeletion                   *struct {
		Step        string
		DeleteAfter *time.Time
	}
}

func (a *agent) claims() []apiClaim {
	a.t.Helper()
	code, body := a.get("/v1/claims")
	if code != 200 {
		a.t.Fatalf("/v1/claims: %d %s", code, body)
	}
	var out struct{ Claims []apiClaim }
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		a.t.Fatalf("/v1/claims: %v: %s", err, body)
	}
	return out.Claims
}

// disk makes a directory standing for a local disk, with one file on it.
func disk(t *testing.T, name string) string {
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "label"), []byte(name), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLocalPVThroughAClaim: from manifests, the agent binds a pod's claim
// to the smallest local PV that fits, bind-mounts it into the pod's volume
// directory named after the PV, keeps the binding across a restart (even
// when a smaller PV appears), and on teardown unmounts and deletes nothing
// on the disk; a deleted claim leaves its PV Released with its data.
func TestLocalPVThroughAClaim(t *testing.T) {
	a := newAgent(t)
	symlinkedRoot(t, a) // as a symlinked /var/lib would
	small, big := disk(t, "small"), disk(t, "big")
	a.writeManifest("pvs.yaml", fmt.Sprintf(localPV, "pv-small", "2Gi", small)+"---"+fmt.Sprintf(localPV, "pv-big", "10Gi", big))
	a.writeManifest("claim.yaml", dataClaim)
	a.writeManifest("pod.yaml", fmt.Sprintf(claimPod, "db"))
	a.start()
	p := a.waitPod("default", "db", 10*time.Second, ready)
	v := p.volume("store")
	wantPath := filepath.Join(a.resolvedRoot(), "pods", p.UID, "volumes", "kubernetes.io~local-volume", "pv-small")
	if v.Path != wantPath || v.Claim != "data" || v.PV != "pv-small" || v.Plugin != "kubernetes.io/local-volume" {
		t.Fatalf("volume = %+v; want pv-small at %s", v, wantPath)
	}
	if got := a.claims(); len(got) != 1 || got[0].Phase != "Bound" || got[0].PV != "pv-small" {
		t.Fatalf("/v1/claims = %+v; want data Bound to pv-small", got)
	}
	checkFile(t, filepath.Join(v.Path, "label"), "small")
	if err := os.WriteFile(filepath.Join(v.Path, "written-by-pod"), []byte("db data"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(small, "written-by-pod"), "db data")

	// A restart neither remounts nor moves the binding, even when a
	// smaller PV that fits appears while the agent is down.
	ids := mountIDsUnder(t, a.resolvedRoot())
	if !strings.Contains(ids, v.Path) {
		t.Fatalf("mounts under the root %q do not show the volume", ids)
	}
	a.restart(false)
	a.waitPod("default", "db", 10*time.Second, ready)
	if after := mountIDsUnder(t, a.resolvedRoot()); after != ids {
		t.Errorf("SIGTERM restart remounted: %s -> %s", ids, after)
	}
	a.kill()
	tiny := disk(t, "tiny")
	a.writeManifest("tiny.yaml", fmt.Sprintf(localPV, "pv-tiny", "1Gi", tiny))
	a.start()
	p = a.waitPod("default", "db", 10*time.Second, ready)
	if p.volume("store").PV != "pv-small" {
		t.Fatalf("after a restart the claim moved to %s", p.volume("store").PV)
	}
	if after := mountIDsUnder(t, a.resolvedRoot()); after != ids {
		t.Errorf("SIGKILL restart remounted: %s -> %s", ids, after)
	}

	// A directory of the same file system bind-mounted inside the volume
	// (a runtime may do it) holds the teardown back, crash or not: nothing
	// is deleted, and the teardown completes once it is gone.
	src := disk(t, "nested-source")
	nested := filepath.Join(v.Path, "nested")
	if err := os.Mkdir(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "--bind", src, nested).CombinedOutput(); err != nil {
		t.Fatalf("bind mount: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", nested).Run() })
	a.removeManifest("pod.yaml")
	for _, crash := range []bool{false, true} {
		time.Sleep(time.Second) // teardown attempts fail meanwhile
		if !isMountPoint(t, nested) || !isMountPoint(t, v.Path) {
			t.Fatalf("(crash %v) a mount was taken down under a nested mount", crash)
		}
		checkFile(t, filepath.Join(src, "label"), "nested-source")
		checkFile(t, filepath.Join(small, "written-by-pod"), "db data")
		if !crash {
			a.restart(true)
		}
	}
	if out, err := exec.Command("umount", nested).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v: %s", err, out)
	}
	a.waitPodDirGone(p.UID)
	checkFile(t, filepath.Join(src, "label"), "nested-source")
	checkFile(t, filepath.Join(small, "written-by-pod"), "db data")
	checkFile(t, filepath.Join(small, "label"), "small")

	a.removeManifest("claim.yaml")
	waitFor(t, 5*time.Second, "the claim's PV Released", func() (bool, string) {
		got := a.claims()
		return len(got) == 1 && got[0].Phase == "Released" && got[0].PV == "pv-small", fmt.Sprint(got)
	})
	checkFile(t, filepath.Join(small, "written-by-pod"), "db data")
}

// TestClaimThatCannotBindWaits: a claim no PV fits leaves its pod's volume
// Pending with the reason, and a PV that fits later binds it; a pod whose
// claim does not exist fails that volume only.
func TestClaimThatCannotBindWaits(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("claim.yaml", dataClaim)
	a.writeManifest("pod.yaml", fmt.Sprintf(claimPod, "db")+"---"+strings.Replace(fmt.Sprintf(claimPod, "orphan"), "claimName: data", "claimName: missing", 1))
	a.start()
	p := a.waitPod("default", "db", 10*time.Second, func(p apiPod) bool {
		return strings.Contains(p.volume("store").Error, "waiting: claim default/data is not bound yet")
	})
	if p.volume("store").State != "Pending" {
		t.Fatalf("volume = %+v; want Pending", p.volume("store"))
	}
	if got := a.claims(); len(got) != 1 || got[0].Phase != "Pending" || !strings.Contains(got[0].Error, "no PersistentVolume") {
		t.Fatalf("/v1/claims = %+v; want Pending with the reason", got)
	}
	a.waitPod("default", "orphan", 5*time.Second, func(p apiPod) bool {
		v := p.volume("store")
		return v.State == "Failed" && strings.Contains(v.Error, "claim default/missing not found")
	})
	a.writeManifest("pv.yaml", fmt.Sprintf(localPV, "pv-1", "1Gi", disk(t, "d")))
	a.waitPod("default", "db", 10*time.Second, ready)
}

// TestLocalBlockDevicePVSharedByTwoPods: a local PV on a block device (a
// loop device, formatted by the agent because it is empty) is mounted once
// for the PV and bind-mounted into each pod that uses it; the global mount
// goes with the last pod, and the data stays on the device.
func TestLocalBlockDevicePVSharedByTwoPods(t *testing.T) {
	a := newAgent(t)
	dev := plugintest.LoopDevice(t)
	a.writeManifest("pv.yaml", fmt.Sprintf(localPV, "pv-dev", "30Mi", dev))
	a.writeManifest("claim.yaml", strings.Replace(dataClaim, "storage: 1Gi", "storage: 10Mi", 1))
	a.writeManifest("pods.yaml", fmt.Sprintf(claimPod, "one")+"---"+fmt.Sprintf(claimPod, "two"))
	a.start()
	one := a.waitPod("default", "one", 20*time.Second, ready)
	two := a.waitPod("default", "two", 10*time.Second, ready)
	global := filepath.Join(a.root, "plugins", "kubernetes.io", "local-volume", "mounts", "pv-dev")
	if n := len(mountsAt(t, global)); n != 1 {
		t.Fatalf("%d mounts at the global mount %s, want 1", n, global)
	}
	for _, p := range []apiPod{one, two} {
		if n := len(mountsAt(t, p.volume("store").Path)); n != 1 {
			t.Fatalf("pod %s: %d mounts at its volume, want 1", p.Name, n)
		}
	}
	if err := os.WriteFile(filepath.Join(one.volume("store").Path, "shared"), []byte("from one"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(two.volume("store").Path, "shared"), "from one")

	a.writeManifest("pods.yaml", fmt.Sprintf(claimPod, "two"))
	a.waitPodDirGone(one.UID)
	if n := len(mountsAt(t, global)); n != 1 {
		t.Fatal("the global mount went with the first of two pods")
	}
	checkFile(t, filepath.Join(two.volume("store").Path, "shared"), "from one")
	a.removeManifest("pods.yaml")
	a.waitPodDirGone(two.UID)
	waitFor(t, 5*time.Second, "the global mount gone with the last pod", func() (bool, string) {
		_, err := os.Lstat(global)
		return os.IsNotExist(err), fmt.Sprint(err)
	})
	// The data is on the device.
	a.writeManifest("pods.yaml", fmt.Sprintf(claimPod, "three"))
	three := a.waitPod("default", "three", 20*time.Second, ready)
	checkFile(t, filepath.Join(three.volume("store").Path, "shared"), "from one")
}

// mountsAt lists the mount table's entries at dir.
func mountsAt(t *testing.T, dir string) []mountEntry {
	var out []mountEntry
	for _, m := range readMountinfo(t) {
		if m.point == dir {
			out = append(out, m)
		}
	}
	return out
}

// TestCrashDuringTeardownDeletesNothing: the agent is SIGKILLed at random
// moments while it tears down a pod whose local PV holds files, and started
// again; every time the teardown completes and every file is intact on the
// disk.
func TestCrashDuringTeardownDeletesNothing(t *testing.T) {
	a := newAgent(t)
	store := disk(t, "store")
	for i := range 200 {
		if err := os.WriteFile(filepath.Join(store, fmt.Sprintf("f%03d", i)), []byte(fmt.Sprint(i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sums := checksums(t, store)
	a.writeManifest("pv.yaml", fmt.Sprintf(localPV, "pv-1", "1Gi", store)+"---"+dataClaim)
	a.start()
	for round := range 8 {
		name := fmt.Sprintf("db-%d", round)
		a.writeManifest("pod.yaml", fmt.Sprintf(claimPod, name))
		p := a.waitPod("default", name, 10*time.Second, ready)
		if err := os.WriteFile(filepath.Join(p.volume("store").Path, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		a.removeManifest("pod.yaml")
		time.Sleep(time.Duration(round*7) * time.Millisecond) // from before the teardown to after it
		a.kill()
		a.start()
		a.waitPodDirGone(p.UID)
		checkData(t, "local PV", store, sums)
		checkFile(t, filepath.Join(store, name), name)
	}
	if m := mountsUnder(t, a.root); len(m) > 0 {
		t.Fatalf("left mounted: %v", m)
	}
}

// TestLocalPVFSGroupStaysInTheVolume: a pod with an fsGroup gets its local
// PV's files and directories (group read-write, setgid directories), while
// what the volume's symlinks and hard links reach outside it — a root-only
// directory and a root-only file — keeps its modes and group, and the agent
// warns about the file it left.
func TestLocalPVFSGroupStaysInTheVolume(t *testing.T) {
	a := newAgent(t)
	vol, outside := disk(t, "d"), t.TempDir()
	secret, shadow := filepath.Join(outside, "secret"), filepath.Join(outside, "shadow")
	if err := os.Mkdir(secret, 0o700); err != nil {
		t.Fatal(err)
	}
	plugintest.WriteFile(t, filepath.Join(secret, "key"), "k")
	plugintest.WriteFile(t, shadow, "s")
	plugintest.WriteFile(t, filepath.Join(vol, "sub", "f"), "f")
	for _, err := range []error{
		os.Chmod(filepath.Join(secret, "key"), 0o600), os.Chmod(shadow, 0o600), os.Chmod(filepath.Join(vol, "sub", "f"), 0o600),
		os.Symlink(secret, filepath.Join(vol, "sub", "escape")), os.Link(shadow, filepath.Join(vol, "linked")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	before := fmt.Sprint(ownersUnder(t, outside))
	a.writeManifest("pv.yaml", fmt.Sprintf(localPV, "pv-1", "1Gi", vol))
	a.writeManifest("claim.yaml", dataClaim)
	a.writeManifest("pod.yaml", strings.Replace(fmt.Sprintf(claimPod, "db"), "spec:\n", "spec:\n  securityContext: {fsGroup: 2000}\n", 1))
	a.start()
	a.waitPod("default", "db", 10*time.Second, ready)
	for rel, want := range map[string]os.FileMode{
		".": os.ModeDir | os.ModeSetgid | 0o775, "sub": os.ModeDir | os.ModeSetgid | 0o775, "sub/f": 0o660, "label": 0o664,
	} {
		if got := ownersUnder(t, filepath.Join(vol, rel))[filepath.Join(vol, rel)]; got != fmt.Sprintf("%v gid 2000", want) {
			t.Errorf("%s: %s; want %v gid 2000", rel, got, want)
		}
	}
	if after := fmt.Sprint(ownersUnder(t, outside)); after != before {
		t.Errorf("outside the volume:\n%s\nwas\n%s", after, before)
	}
	if !strings.Contains(a.logs.String(), "fsGroup not given to files with more than one hard link") {
		t.Error("no warning about the file linked outside the volume")
	}
}

// TestLocalPVPathAUserCanChangeIsRefused: a local PV whose directory is
// held by a directory a user owns (uid 1000), who could swap it for a
// symlink to any directory of the node, is refused, the volume's error
// naming the PV, the path and that directory, while the user swaps it for
// a symlink to a root-only directory and back; nothing is mounted in the
// pod. Once the directory is root's, the next retry mounts the PV.
func TestLocalPVPathAUserCanChangeIsRefused(t *testing.T) {
	a := newAgent(t)
	base := t.TempDir()
	user, other := filepath.Join(base, "user"), filepath.Join(base, "other")
	vol := filepath.Join(user, "vol")
	plugintest.WriteFile(t, filepath.Join(vol, "label"), "vol")
	plugintest.WriteFile(t, filepath.Join(other, "secret"), "root only")
	for _, err := range []error{os.Chmod(base, 0o755), os.Chmod(other, 0o700), os.Chown(user, 1000, 1000)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the user's swaps
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, err := range []error{os.Rename(vol, vol+".away"), os.Symlink(other, vol), os.Remove(vol), os.Rename(vol+".away", vol)} {
				if err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	a.writeManifest("pv.yaml", fmt.Sprintf(localPV, "pv-1", "1Gi", vol))
	a.writeManifest("claim.yaml", dataClaim)
	a.writeManifest("pod.yaml", fmt.Sprintf(claimPod, "db"))
	a.start()
	p := a.waitPod("default", "db", 20*time.Second, func(p apiPod) bool {
		return strings.Contains(p.volume("store").Error, "spec.local.path is refused")
	})
	close(stop)
	<-done
	if e := p.volume("store").Error; !strings.Contains(e, "PersistentVolume pv-1") || !strings.Contains(e, user+" belongs to uid 1000") {
		t.Errorf("volume error %q; want it to name the PV and %s", e, user)
	}
	dir := filepath.Join(a.resolvedRoot(), "pods", p.UID, "volumes", "kubernetes.io~local-volume", "pv-1")
	if _, err := os.Stat(filepath.Join(dir, "secret")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the pod's volume directory shows the other directory: %v", err)
	}
	if err := os.Chown(user, 0, 0); err != nil {
		t.Fatal(err)
	}
	p = a.waitPod("default", "db", 60*time.Second, ready)
	checkFile(t, filepath.Join(p.volume("store").Path, "label"), "vol")
}

// ownersUnder maps every entry at and below dir to its mode and group.
func ownersUnder(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		m[p] = fmt.Sprintf("%v gid %d", fi.Mode(), fi.Sys().(*syscall.Stat_t).Gid)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
