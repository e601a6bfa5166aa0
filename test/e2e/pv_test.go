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
	small, big := disk(t, "small"), disk(t, "big")
	a.writeManifest("pvs.yaml", fmt.Sprintf(localPV, "pv-small", "2Gi", small)+"---"+fmt.Sprintf(localPV, "pv-big", "10Gi", big))
	a.writeManifest("claim.yaml", dataClaim)
	a.writeManifest("pod.yaml", fmt.Sprintf(claimPod, "db"))
	a.start()
	p := a.waitPod("default", "db", 10*time.Second, ready)
	v := p.volume("store")
	wantPath := filepath.Join(a.root, "pods", p.UID, "volumes", "kubernetes.io~local-volume", "pv-small")
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

	// A smaller PV that fits appears while the agent is down: the binding
	// stays where it is.
	ids := mountIDsUnder(t, a.root)
	a.kill()
	tiny := disk(t, "tiny")
	a.writeManifest("tiny.yaml", fmt.Sprintf(localPV, "pv-tiny", "1Gi", tiny))
	a.start()
	p = a.waitPod("default", "db", 10*time.Second, ready)
	if p.volume("store").PV != "pv-small" {
		t.Fatalf("after a restart the claim moved to %s", p.volume("store").PV)
	}
	if after := mountIDsUnder(t, a.root); after != ids {
		t.Errorf("restart remounted: %s -> %s", ids, after)
	}

	a.removeManifest("pod.yaml")
	a.waitPodDirGone(p.UID)
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
		return strings.Contains(p.volume("store").Error, "waiting for claim default/data to be bound")
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
