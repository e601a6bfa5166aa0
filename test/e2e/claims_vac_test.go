package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// withSpecField adds one field to the spec of a manifest's object.
func withSpecField(manifest, field string) string {
	return strings.Replace(manifest, "\nspec:\n", "\nspec:\n  "+field+"\n", 1)
}

// claimOf returns the claim name of /v1/claims, or the zero value.
func claimOf(claims []apiClaim, name string) apiClaim {
	for _, c := range claims {
		if c.Name == name {
			return c
		}
	}
	return apiClaim{}
}

// TestVolumeAttributesClassBinding: from manifests, a claim binds only to a
// PersistentVolume of the same volumeAttributesClassName, as the PV
// controller does: a claim asking for silver never takes a PV without an
// attributes class, nor one of class gold that it names in
// spec.volumeName; /v1/claims says why. A PV of class silver is taken.
func TestVolumeAttributesClassBinding(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("pvs.yaml", fmt.Sprintf(localPV, "pv-plain", "1Gi", disk(t, "plain"))+"---"+
		withSpecField(fmt.Sprintf(localPV, "pv-gold", "1Gi", disk(t, "gold")), "volumeAttributesClassName: gold"))
	silverClaim := withSpecField(dataClaim, "volumeAttributesClassName: silver")
	named := strings.Replace(withSpecField(silverClaim, "volumeName: pv-gold"), "name: data", "name: named", 1)
	a.writeManifest("claims.yaml", silverClaim+"---"+named)
	a.writeManifest("pods.yaml", fmt.Sprintf(claimPod, "db")+"---"+
		strings.Replace(fmt.Sprintf(claimPod, "pinned"), "claimName: data", "claimName: named", 1))
	a.start()

	wantReasons := map[string]string{
		"data":  `pv-plain: volumeAttributesClass "" ≠ "silver"`,
		"named": `PersistentVolume "pv-gold" named by spec.volumeName of claim default/named: volumeAttributesClass "gold" ≠ "silver"`,
	}
	check := func() (bool, string) {
		claims := a.claims()
		for name, reason := range wantReasons {
			c := claimOf(claims, name)
			if c.Phase != "Pending" || c.PV != "" || !strings.Contains(c.Error, reason) {
				return false, fmt.Sprintf("%+v", claims)
			}
		}
		return true, ""
	}
	waitFor(t, 10*time.Second, "both claims Pending with the attributes class as the reason", check)
	// Not a moment's state: a few passes later nothing is bound, and the
	// pods' volumes wait for their claims.
	time.Sleep(time.Second)
	if ok, detail := check(); !ok {
		t.Fatalf("/v1/claims = %s; want both claims still Pending", detail)
	}
	for pod, claim := range map[string]string{"db": "data", "pinned": "named"} {
		p, _ := a.pod("default", pod)
		if v := p.volume("store"); v.State != "Pending" || v.Path != "" || !strings.Contains(v.Error, "waiting: claim default/"+claim+" is not bound yet: ") {
			t.Errorf("pod %s: volume = %+v; want Pending, waiting for its claim", pod, v)
		}
	}

	// A PersistentVolume of the claim's attributes class is taken.
	a.writeManifest("silver.yaml", withSpecField(fmt.Sprintf(localPV, "pv-silver", "1Gi", disk(t, "silver")), "volumeAttributesClassName: silver"))
	p := a.waitPod("default", "db", 10*time.Second, ready)
	if v := p.volume("store"); v.PV != "pv-silver" {
		t.Fatalf("volume = %+v; want pv-silver", v)
	}
	if c := claimOf(a.claims(), "named"); c.Phase != "Pending" {
		t.Fatalf("claim named = %+v; want still Pending: it names pv-gold", c)
	}
}
