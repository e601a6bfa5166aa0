package binder

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestMatch has one row per rule of the PV controller that the binder
// follows. want is the PersistentVolume chosen; when it is empty the claim
// stays Pending and the reason must contain every string of reason.
func TestMatch(t *testing.T) {
	other := claimKey{namespace: "default", name: "other"}
	tests := []struct {
		name        string
		claim       *v1.PersistentVolumeClaim
		pvs         []*v1.PersistentVolume
		unavailable map[string]holder
		want        string
		reason      []string
	}{
		{name: "the smallest PV that fits",
			claim: newClaim("data", "1Gi"),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "10Gi"), newPV("pv-b", "2Gi"), newPV("pv-c", "5Gi")},
			want:  "pv-b"},
		{name: "a PV smaller than the request is refused",
			claim: newClaim("data", "5Gi"),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi"), newPV("pv-b", "10Gi")},
			want:  "pv-b"},
		{name: "a PV exactly the request's size fits",
			claim: newClaim("data", "5Gi"),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "5Gi"), newPV("pv-b", "10Gi")},
			want:  "pv-a"},
		{name: "equal sizes: the first name wins",
			claim: newClaim("data", "1Gi"),
			pvs:   []*v1.PersistentVolume{newPV("pv-b", "5Gi"), newPV("pv-c", "5Gi"), newPV("pv-a", "5Gi")},
			want:  "pv-a"},
		{name: "sizes compare by value, not by notation",
			claim: newClaim("data", "1G"),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi"), newPV("pv-b", "1000M")},
			want:  "pv-b"},
		{name: "class: the claim's class must equal the PV's",
			claim: newClaim("data", "1Gi", claimClass("fast")),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvClass("slow")), newPV("pv-b", "5Gi", pvClass("fast"))},
			want:  "pv-b"},
		{name: "class: an empty class matches only an empty class",
			claim:  newClaim("data", "1Gi"),
			pvs:    []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvClass("fast"))},
			reason: []string{`pv-a: class "fast" ≠ ""`}},
		{name: "class: the beta annotation wins over spec.storageClassName",
			claim: newClaim("data", "1Gi", claimClass("slow"), claimBetaClass("fast")),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvClass("slow")), newPV("pv-b", "5Gi", pvClass("fast"))},
			want:  "pv-b"},
		{name: "access modes: the PV's must include all of the claim's",
			claim: newClaim("data", "1Gi", claimModes(v1.ReadWriteOnce, v1.ReadOnlyMany)),
			pvs: []*v1.PersistentVolume{newPV("pv-a", "1Gi"),
				newPV("pv-b", "5Gi", pvModes(v1.ReadOnlyMany, v1.ReadWriteMany, v1.ReadWriteOnce))},
			want: "pv-b"},
		{name: "access modes: a PV lacking one is refused",
			claim:  newClaim("data", "1Gi", claimModes(v1.ReadWriteMany)),
			pvs:    []*v1.PersistentVolume{newPV("pv-a", "1Gi")},
			reason: []string{"pv-a: access modes [ReadWriteOnce] lack some of [ReadWriteMany]"}},
		{name: "volumeMode: Block wants Block",
			claim: newClaim("data", "1Gi", claimVolumeMode(v1.PersistentVolumeBlock)),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi"), newPV("pv-b", "5Gi", pvVolumeMode(v1.PersistentVolumeBlock))},
			want:  "pv-b"},
		{name: "volumeMode: unset is Filesystem",
			claim: newClaim("data", "1Gi"),
			pvs: []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvVolumeMode(v1.PersistentVolumeBlock)),
				newPV("pv-b", "5Gi", pvVolumeMode(v1.PersistentVolumeFilesystem))},
			want: "pv-b"},
		{name: "selector: the PV's labels must match",
			claim: newClaim("data", "1Gi", claimSelector("tier", "gold")),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvLabels("tier", "silver")), newPV("pv-b", "5Gi", pvLabels("tier", "gold"))},
			want:  "pv-b"},
		{name: "selector: an invalid one leaves the claim Pending",
			claim: newClaim("data", "1Gi", func(c *v1.PersistentVolumeClaim) {
				c.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Near"}}}
			}),
			pvs:    []*v1.PersistentVolume{newPV("pv-a", "1Gi")},
			reason: []string{"claim default/data has an invalid selector"}},
		{name: "pre-bound to this claim: wins over a smaller PV",
			claim: newClaim("data", "1Gi"),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi"), newPV("pv-b", "9Gi", pvClaimRef("default", "data", ""))},
			want:  "pv-b"},
		{name: "pre-bound to this claim: the UID must match when set",
			claim: newClaim("data", "1Gi", claimUID("u1")),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvClaimRef("default", "data", "u1")), newPV("pv-b", "1Gi")},
			want:  "pv-a"},
		{name: "pre-bound to this claim: class and selector do not apply, as in the PV controller",
			claim: newClaim("data", "1Gi", claimClass("fast"), claimSelector("tier", "gold")),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvClaimRef("default", "data", ""))},
			want:  "pv-a"},
		{name: "pre-bound to this claim but too small: passed over",
			claim: newClaim("data", "5Gi"),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvClaimRef("default", "data", "")), newPV("pv-b", "5Gi")},
			want:  "pv-b"},
		{name: "pre-bound to this claim but for another node: Pending, as in the PV controller",
			claim:  newClaim("data", "1Gi"),
			pvs:    []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvClaimRef("default", "data", ""), pvOnNode(v1.LabelHostname, "node-2")), newPV("pv-b", "5Gi")},
			reason: []string{`PersistentVolume "pv-a" is pre-bound to claim default/data`, "node affinity check failed"}},
		{name: "pre-bound to another claim: never taken",
			claim:  newClaim("data", "1Gi"),
			pvs:    []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvClaimRef("default", "other", ""))},
			reason: []string{"pv-a: pre-bound to default/other"}},
		{name: "pre-bound to an earlier claim of the same name (another UID): never taken",
			claim:  newClaim("data", "1Gi", claimUID("u2")),
			pvs:    []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvClaimRef("default", "data", "u1"))},
			reason: []string{"pv-a: pre-bound to default/data"}},
		{name: "volumeName: only that PV, even when a smaller one fits",
			claim: newClaim("data", "1Gi", claimVolumeName("pv-b")),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi"), newPV("pv-b", "9Gi")},
			want:  "pv-b"},
		{name: "volumeName: a PV already bound to this claim",
			claim: newClaim("data", "1Gi", claimVolumeName("pv-a")),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvClaimRef("default", "data", ""))},
			want:  "pv-a"},
		{name: "volumeName: a PV bound to another claim leaves the claim Pending",
			claim:  newClaim("data", "1Gi", claimVolumeName("pv-a")),
			pvs:    []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvClaimRef("default", "other", "")), newPV("pv-b", "1Gi")},
			reason: []string{`PersistentVolume "pv-a" named by spec.volumeName`, "pre-bound to default/other"}},
		{name: "volumeName: a PV that does not exist",
			claim:  newClaim("data", "1Gi", claimVolumeName("pv-z")),
			pvs:    []*v1.PersistentVolume{newPV("pv-a", "1Gi")},
			reason: []string{`PersistentVolume "pv-z" named by spec.volumeName of claim default/data does not exist`}},
		{name: "volumeName: the PV must still satisfy the claim",
			claim:  newClaim("data", "5Gi", claimVolumeName("pv-a")),
			pvs:    []*v1.PersistentVolume{newPV("pv-a", "1Gi")},
			reason: []string{"too small (1Gi < 5Gi)"}},
		{name: "node affinity: a PV for this node's hostname",
			claim: newClaim("data", "1Gi"),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvOnNode(v1.LabelHostname, "node-1"))},
			want:  "pv-a"},
		{name: "node affinity: a PV for a label of the Node object",
			claim: newClaim("data", "1Gi"),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvOnNode("zone", "a"))},
			want:  "pv-a"},
		{name: "node affinity: a PV for another node is refused",
			claim: newClaim("data", "1Gi"),
			pvs: []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvOnNode(v1.LabelHostname, "node-2")),
				newPV("pv-b", "1Gi", pvOnNode("zone", "b"))},
			reason: []string{`pv-a: node affinity check failed: its spec.nodeAffinity does not match node "node-1"`, `pv-b: node affinity check failed`}},
		{name: "records: a PV bound to another claim is never taken",
			claim:       newClaim("data", "1Gi"),
			pvs:         []*v1.PersistentVolume{newPV("pv-a", "1Gi"), newPV("pv-b", "5Gi")},
			unavailable: map[string]holder{"pv-a": {claim: other, why: "bound to default/other"}},
			want:        "pv-b"},
		{name: "records: a PV released by another claim is never taken",
			claim:       newClaim("data", "1Gi"),
			pvs:         []*v1.PersistentVolume{newPV("pv-a", "1Gi")},
			unavailable: map[string]holder{"pv-a": {claim: other, why: "released by default/other and retained for it"}},
			reason:      []string{"pv-a: released by default/other"}},
		{name: "a PV another claim names in spec.volumeName is left to it",
			claim:       newClaim("data", "1Gi"),
			pvs:         []*v1.PersistentVolume{newPV("pv-a", "1Gi"), newPV("pv-b", "5Gi")},
			unavailable: map[string]holder{"pv-a": {claim: other, why: "named by spec.volumeName of claim default/other"}},
			want:        "pv-b"},
		{name: "a PV this claim names in spec.volumeName is its own",
			claim:       newClaim("data", "1Gi", claimVolumeName("pv-a")),
			pvs:         []*v1.PersistentVolume{newPV("pv-a", "1Gi")},
			unavailable: map[string]holder{"pv-a": {claim: claimKey{namespace: "default", name: "data"}, why: "named by ..."}},
			want:        "pv-a"},
		{name: "volumeAttributesClass: a claim asking for one never takes a PV without one",
			claim:  newClaim("data", "1Gi", claimVAC("silver")),
			pvs:    []*v1.PersistentVolume{newPV("pv-a", "1Gi")},
			reason: []string{`pv-a: volumeAttributesClass "" ≠ "silver"`}},
		{name: "volumeAttributesClass: a claim without one never takes a PV with one",
			claim:  newClaim("data", "1Gi"),
			pvs:    []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvVAC("gold"))},
			reason: []string{`pv-a: volumeAttributesClass "gold" ≠ ""`}},
		{name: "volumeAttributesClass: the claim's must equal the PV's, even against a smaller PV",
			claim: newClaim("data", "1Gi", claimVAC("silver")),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvVAC("gold")), newPV("pv-b", "2Gi"), newPV("pv-c", "5Gi", pvVAC("silver"))},
			want:  "pv-c"},
		{name: "volumeAttributesClass: unset and empty are the same",
			claim: newClaim("data", "1Gi", claimVAC("")),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi")},
			want:  "pv-a"},
		{name: "volumeAttributesClass: pre-bound to this claim but of another one: passed over, as in the PV controller",
			claim: newClaim("data", "1Gi", claimVAC("silver")),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvClaimRef("default", "data", ""), pvVAC("gold")), newPV("pv-b", "5Gi", pvVAC("silver"))},
			want:  "pv-b"},
		{name: "volumeAttributesClass: volumeName names a PV of another one",
			claim:  newClaim("data", "1Gi", claimVolumeName("pv-a"), claimVAC("silver")),
			pvs:    []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvVAC("gold")), newPV("pv-b", "1Gi", pvVAC("silver"))},
			reason: []string{`PersistentVolume "pv-a" named by spec.volumeName of claim default/data`, `volumeAttributesClass "gold" ≠ "silver"`}},
		{name: "volumeAttributesClass: volumeName names a PV without one",
			claim:  newClaim("data", "1Gi", claimVolumeName("pv-a"), claimVAC("silver")),
			pvs:    []*v1.PersistentVolume{newPV("pv-a", "1Gi")},
			reason: []string{`volumeAttributesClass "" ≠ "silver"`}},
		{name: "volumeAttributesClass: volumeName names a PV of the same one",
			claim: newClaim("data", "1Gi", claimVolumeName("pv-a"), claimVAC("silver")),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvVAC("silver"))},
			want:  "pv-a"},
		{name: "no fit: Pending, saying why each PV was refused",
			claim: newClaim("data", "5Gi"),
			pvs:   []*v1.PersistentVolume{newPV("pv-a", "1Gi"), newPV("pv-b", "9Gi", pvClass("fast"))},
			reason: []string{"no PersistentVolume fits claim default/data (2 checked: ",
				"pv-a: too small (1Gi < 5Gi)", `pv-b: class "fast" ≠ ""`}},
		{name: "no fit: no PVs at all",
			claim:  newClaim("data", "5Gi"),
			reason: []string{"no PersistentVolume fits claim default/data (none defined)"}},
	}
	node := thisNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"zone": "a"}}}, "node-1")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pv, why := match(tt.claim, candidates{pvs: tt.pvs, node: node, unavailable: tt.unavailable})
			got := ""
			if pv != nil {
				got = pv.Name
			}
			if got != tt.want {
				t.Fatalf("match = %q (%s), want %q", got, why, tt.want)
			}
			if (why == "") != (pv != nil) {
				t.Errorf("match = %q with reason %q: a reason goes with no PV, and only then", got, why)
			}
			for _, r := range tt.reason {
				if !strings.Contains(why, r) {
					t.Errorf("reason %q does not contain %q", why, r)
				}
			}
		})
	}
}

// A claim that fits none of many PersistentVolumes gets a reason of
// bounded length: it names a few and counts the rest.
func TestNoFitReasonIsBounded(t *testing.T) {
	var pvs []*v1.PersistentVolume
	for i := range 200 {
		pvs = append(pvs, newPV(fmt.Sprintf("pv-%03d", i), "1Gi"))
	}
	node := thisNode(nil, "node-1")
	_, why := match(newClaim("data", "5Gi"), candidates{pvs: pvs, node: node})
	if len(why) > 300 || !strings.Contains(why, "200 checked") || !strings.Contains(why, "and 196 more") {
		t.Errorf("reason (%d bytes) %q: want the count, a few PVs and how many more", len(why), why)
	}
}

// The hostname label comes from --node-name, unless the Node object sets it.
func TestThisNode(t *testing.T) {
	n := thisNode(nil, "node-1")
	if n.Name != "node-1" || n.Labels[v1.LabelHostname] != "node-1" {
		t.Errorf("without a Node object: %+v", n.ObjectMeta)
	}
	obj := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"zone": "a", v1.LabelHostname: "host-1"}}}
	n = thisNode(obj, "node-1")
	if n.Labels["zone"] != "a" || n.Labels[v1.LabelHostname] != "host-1" {
		t.Errorf("with a Node object: %+v", n.ObjectMeta)
	}
	if len(obj.Labels) != 2 {
		t.Errorf("thisNode modified the Node object: %v", obj.Labels)
	}
}

func claimVAC(name string) func(*v1.PersistentVolumeClaim) {
	return func(c *v1.PersistentVolumeClaim) { c.Spec.VolumeAttributesClassName = &name }
}

func pvVAC(name string) func(*v1.PersistentVolume) {
	return func(pv *v1.PersistentVolume) { pv.Spec.VolumeAttributesClassName = &name }
}
