package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// maxCLIError is where volume-agent status cuts an error in its table.
const maxCLIError = 80

// cut is how volume-agent status cuts an error: one line, width characters
// at most, the last three "...".
func cut(s string, width int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > width {
		return string(r[:width-3]) + "..."
	}
	return s
}

// A claim that cannot bind says why where operators look: the pod's volume
// error (with "node affinity check failed" for a PV of another node, as in
// cluster mode), volume-agent status (a readiness line above the table,
// errors whole with -o wide) and volume-agent claims (with capacity once
// bound).
func TestClaimReasonsReachStatus(t *testing.T) {
	a := newAgent(t)
	elsewhere := strings.Replace(fmt.Sprintf(localPV, "pv-far", "1Gi", disk(t, "far")), "values: [node-1]", "values: [node-2]", 1)
	a.writeManifest("pv.yaml", elsewhere)
	a.writeManifest("claim.yaml", dataClaim)
	a.writeManifest("pod.yaml", fmt.Sprintf(claimPod, "db"))
	a.start()
	want := `waiting: claim default/data is not bound yet: StorageClass "local" does not exist: no PersistentVolume fits claim default/data (1 checked: pv-far: node affinity check failed: its spec.nodeAffinity does not match node "node-1")`
	p := a.waitPod("default", "db", 10*time.Second, func(p apiPod) bool { return strings.HasPrefix(p.volume("store").Error, want) })
	want = p.volume("store").Error
	if p.Ready || p.volume("store").State != "Pending" {
		t.Errorf("pod db = %+v; want Pending", p)
	}
	out := runCLI(t, "status", "--addr", a.addr)
	lines := strings.Split(out.stdout, "\n")
	if out.code != 0 || lines[0] != "Ready: yes" || !strings.Contains(out.stdout, cut(want, maxCLIError)) {
		t.Errorf("volume-agent status:\n%s\nwant the readiness line and the cut error", out.stdout)
	}
	if wide := runCLI(t, "status", "--addr", a.addr, "-o", "wide"); !strings.Contains(wide.stdout, want) {
		t.Errorf("volume-agent status -o wide:\n%s\nwant the whole error %q", wide.stdout, want)
	}
	claims := runCLI(t, "claims", "--addr", a.addr, "-o", "wide")
	if !strings.Contains(claims.stdout, "default/data  Pending") || !strings.Contains(claims.stdout, "node affinity check failed") {
		t.Errorf("volume-agent claims -o wide:\n%s\nwant data Pending with the reason", claims.stdout)
	}

	// A PV that fits: bound, and the claims table shows its capacity.
	a.writeManifest("pv-near.yaml", fmt.Sprintf(localPV, "pv-near", "2Gi", disk(t, "near")))
	a.waitPod("default", "db", 20*time.Second, ready)
	if c := runCLI(t, "claims", "--addr", a.addr); !strings.Contains(c.stdout, "default/data  Bound  pv-near  2Gi") {
		t.Errorf("volume-agent claims:\n%s\nwant data Bound to pv-near, 2Gi", c.stdout)
	}
}

// A manifest file that has never parsed since start (a stray kind) holds
// every binding back, and says so: the claim's reason and its pod's volume
// name the file and why, and so does the line above volume-agent status.
// Once the file goes, the claim binds.
func TestUnparsedFileIsNamedWhereClaimsWait(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("pv.yaml", fmt.Sprintf(localPV, "pv-a", "1Gi", disk(t, "a")))
	a.writeManifest("claim.yaml", dataClaim)
	a.writeManifest("pod.yaml", fmt.Sprintf(claimPod, "db"))
	a.writeManifest("stray.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {}\n")
	a.start()
	waitFor(t, 10*time.Second, "the claim's reason naming the file", func() (bool, string) {
		c := claimOf(a.claims(), "data")
		return c.Phase == "Pending" && strings.Contains(c.Error, "stray.yaml") && strings.Contains(c.Error, "Deployment"), fmt.Sprintf("%+v", a.claims())
	})
	p, _ := a.pod("default", "db")
	if v := p.volume("store"); !strings.Contains(v.Error, "stray.yaml") || !strings.Contains(v.Error, "Deployment") {
		t.Errorf("volume store of db: %+v; want its error to name stray.yaml and why", v)
	}
	out := runCLI(t, "status", "--addr", a.addr, "-o", "wide")
	if first := strings.Split(out.stdout, "\n")[0]; !strings.HasPrefix(first, "Ready: no: ") || !strings.Contains(first, "stray.yaml") || !strings.Contains(first, "Deployment") {
		t.Errorf("volume-agent status -o wide first line %q; want not ready, naming stray.yaml and why", first)
	}
	a.removeManifest("stray.yaml")
	a.waitPod("default", "db", 20*time.Second, ready)
}
