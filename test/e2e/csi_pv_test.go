package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// csiPVManifest is localPV made a CSI PersistentVolume of the agent's own
// driver, naming the volume %[3]s under --local-path-root, as the
// external-provisioner makes them.
var csiPVManifest = strings.Replace(localPV, "local: {path: %[3]s}", "csi: {driver: local.volume-agent.io, volumeHandle: %[3]s}", 1)

// TestCSIPVOfTheLocalDriver: from manifests, a claim bound to a CSI PV of
// local.volume-agent.io, whose volume is a directory under
// --local-path-root made as the local provisioner makes them, is set up
// by the kubernetes.io/csi plugin: Mounted, the pod ready, the volume's
// data visible and the pod's writes landing in it, its usage reported. A
// SIGKILL restart mounts nothing again. A PV whose handle leaves the root
// fails, naming the field; teardown leaves the data.
func TestCSIPVOfTheLocalDriver(t *testing.T) {
	a := newAgent(t)
	data := filepath.Join(t.TempDir(), "local")
	a.start("--provisioners", "local", "--local-path-root", data, "--volume-stats-period=1s")
	// Made after the start: the binder, finding a volume under the root
	// without its state file, would refuse to start from scratch.
	handle := "default-data-pv-csi" // <namespace>-<claim>-<pv>, as the provisioner names it
	vol := filepath.Join(data, handle)
	if err := os.Mkdir(vol, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(vol, 0o777); err != nil { // mkdir applied the umask
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "label"), []byte("on the volume"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.writeManifest("pv.yaml", fmt.Sprintf(csiPVManifest, "pv-csi", "2Gi", handle)+"---"+
		fmt.Sprintf(csiPVManifest, "pv-forged", "2Gi", "../etc"))
	a.writeManifest("claims.yaml", dataClaim+"---"+strings.Replace(dataClaim, "name: data", "name: forged", 1))
	a.writeManifest("pod.yaml", fmt.Sprintf(claimPod, "db")+"---"+strings.Replace(fmt.Sprintf(claimPod, "forged"), "claimName: data", "claimName: forged", 1))

	p := a.waitPod("default", "db", 20*time.Second, ready)
	v := p.volume("store")
	wantPath := filepath.Join(a.resolvedRoot(), "pods", p.UID, "volumes", "kubernetes.io~csi", "pv-csi")
	if v.Path != wantPath || v.Plugin != "kubernetes.io/csi" || v.PV != "pv-csi" || v.Claim != "data" || v.State != "Mounted" {
		t.Fatalf("volume = %+v; want pv-csi Mounted by kubernetes.io/csi at %s", v, wantPath)
	}
	if !isMountPoint(t, v.Path) {
		t.Fatalf("%s is not a mount point", v.Path)
	}
	checkFile(t, filepath.Join(v.Path, "label"), "on the volume")
	const size = 5 << 20
	if err := os.WriteFile(filepath.Join(v.Path, "five"), []byte(strings.Repeat("x", size)), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(vol, "five")); err != nil || fi.Size() != size {
		t.Fatalf("the pod's write in the volume: %v, %v", fi, err)
	}
	waitFor(t, 15*time.Second, "usage of the 5 MiB written", func() (bool, string) {
		u := a.usageOf("default", "db")["store"]
		b, _ := json.Marshal(u)
		return u != nil && within(u.UsedBytes, size) && u.CapacityBytes > 0 && u.Method != "", string(b)
	})
	forged := a.waitPod("default", "forged", 10*time.Second, func(p apiPod) bool { return p.volume("store").State == "Failed" })
	if e := forged.volume("store").Error; !strings.Contains(e, `PersistentVolume pv-forged: spec.csi.volumeHandle "../etc" contains '/'`) {
		t.Errorf("the forged handle's error = %q", e)
	}

	ids := mountIDsUnder(t, a.resolvedRoot())
	if !strings.Contains(ids, v.Path) {
		t.Fatalf("mounts under the root %q do not show the volume", ids)
	}
	a.restart(true)
	if got := a.waitPod("default", "db", 20*time.Second, ready).volume("store"); got.Path != v.Path || got.State != "Mounted" {
		t.Fatalf("after a SIGKILL restart the volume is %+v", got)
	}
	if after := mountIDsUnder(t, a.resolvedRoot()); after != ids {
		t.Errorf("a SIGKILL restart remounted: %s -> %s", ids, after)
	}
	checkFile(t, filepath.Join(v.Path, "label"), "on the volume")

	a.removeManifest("pod.yaml")
	a.waitPodDirGone(p.UID)
	checkFile(t, filepath.Join(vol, "label"), "on the volume")
	if fi, err := os.Stat(filepath.Join(vol, "five")); err != nil || fi.Size() != size {
		t.Errorf("after the teardown the pod's file is %v, %v", fi, err)
	}
}
