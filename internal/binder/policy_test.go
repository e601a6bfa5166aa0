package binder

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestPlanAppliesTheClaimsReclaimPolicy(t *testing.T) {
	annotated := func(value string) *v1.PersistentVolumeClaim {
		return newClaim("data", "1Gi", claimUID("u1"), claimClass("fast"), func(c *v1.PersistentVolumeClaim) {
			c.Annotations = map[string]string{AnnReclaimPolicy: value}
		})
	}
	retained := provisionedPV(annotated(""), newClass("fast", classRetain))
	rec := record{Namespace: "default", Name: "data", UID: "u1", PV: retained.Name, Phase: PhaseBound, Provisioned: retained}
	static := record{Namespace: "default", Name: "data", UID: "u1", PV: "pv-a", Phase: PhaseBound}
	for _, tc := range []struct {
		name    string
		claim   *v1.PersistentVolumeClaim
		prev    record
		want    v1.PersistentVolumeReclaimPolicy // of the recorded PV; "" for a static one
		pending string
	}{
		{"Delete on a retained volume", annotated("Delete"), rec, v1.PersistentVolumeReclaimDelete, ""},
		{"Retain on a retained volume: nothing to do", annotated("Retain"), rec, v1.PersistentVolumeReclaimRetain, ""},
		{"a misspelt value is refused", annotated("delete"), rec, v1.PersistentVolumeReclaimRetain, `want Delete or Retain; the reclaim policy stays Retain`},
		{"a static PersistentVolume is always retained", annotated("Delete"), static, "", "always retained"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := planWorld([]*v1.PersistentVolumeClaim{tc.claim}, []*v1.PersistentVolume{newPV("pv-a", "1Gi")})
			o := plan(w, records{tc.prev.PV: tc.prev})
			r := o.recs[tc.prev.PV]
			if tc.want != "" && r.Provisioned.Spec.PersistentVolumeReclaimPolicy != tc.want {
				t.Errorf("recorded policy %s, want %s", r.Provisioned.Spec.PersistentVolumeReclaimPolicy, tc.want)
			}
			if why := o.pending[keyOf(tc.claim)]; !strings.Contains(why, tc.pending) || tc.pending == "" && why != "" {
				t.Errorf("reason %q, want %q", why, tc.pending)
			}
			if rec.Provisioned.Spec.PersistentVolumeReclaimPolicy != v1.PersistentVolumeReclaimRetain {
				t.Error("plan modified its input")
			}
		})
	}
}
