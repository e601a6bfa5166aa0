package binder

import (
	"maps"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestPlanSettlesRecords has one row per thing that can happen to a
// record's claim or PersistentVolume. No pod uses the claims, so plan
// binds nothing new.
func TestPlanSettlesRecords(t *testing.T) {
	bound := record{Namespace: "default", Name: "data", UID: "u1", PV: "pv-a", Phase: PhaseBound}
	released := bound
	released.Phase = PhaseReleased
	claim := newClaim("data", "1Gi", claimUID("u1"))
	tests := []struct {
		name   string
		claims []*v1.PersistentVolumeClaim
		pvs    []*v1.PersistentVolume
		prev   record
		want   records
	}{
		{"bound, claim and PV here: kept", []*v1.PersistentVolumeClaim{claim}, []*v1.PersistentVolume{newPV("pv-a", "1Gi")},
			bound, records{"pv-a": bound}},
		{"bound, claim gone: released", nil, []*v1.PersistentVolume{newPV("pv-a", "1Gi")},
			bound, records{"pv-a": released}},
		{"bound, claim replaced by one with another UID: released",
			[]*v1.PersistentVolumeClaim{newClaim("data", "1Gi", claimUID("u2"))}, []*v1.PersistentVolume{newPV("pv-a", "1Gi")},
			bound, records{"pv-a": released}},
		{"bound, PV gone: kept (Lost)", []*v1.PersistentVolumeClaim{claim}, nil,
			bound, records{"pv-a": bound}},
		{"bound, claim and PV gone: dropped", nil, nil,
			bound, records{}},
		{"released, claim back with its UID: bound again", []*v1.PersistentVolumeClaim{claim}, []*v1.PersistentVolume{newPV("pv-a", "1Gi")},
			released, records{"pv-a": bound}},
		{"released, a claim of the same name with another UID: still released",
			[]*v1.PersistentVolumeClaim{newClaim("data", "1Gi", claimUID("u2"))}, []*v1.PersistentVolume{newPV("pv-a", "1Gi")},
			released, records{"pv-a": released}},
		{"released, PV gone: dropped", []*v1.PersistentVolumeClaim{claim}, nil,
			released, records{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := records{tt.prev.PV: tt.prev}
			o := plan(world{claims: tt.claims, pvs: tt.pvs, node: thisNode(nil, "node-1")}, prev)
			if !maps.Equal(o.recs, tt.want) {
				t.Errorf("records %v, want %v", o.recs, tt.want)
			}
			if prev[tt.prev.PV] != tt.prev || len(prev) != 1 {
				t.Errorf("plan modified its input: %v", prev)
			}
		})
	}
}

// In one pass, claims are bound in order, and a PV one claim takes is not
// offered to the next.
func TestPlanBindsEachPVOnce(t *testing.T) {
	w := world{
		pods:   []*v1.Pod{podUsing("web", "a", "b", "c")},
		claims: []*v1.PersistentVolumeClaim{newClaim("a", "1Gi"), newClaim("b", "1Gi"), newClaim("c", "1Gi")},
		pvs:    []*v1.PersistentVolume{newPV("pv-1", "1Gi"), newPV("pv-2", "2Gi")},
		node:   thisNode(nil, "node-1"),
	}
	o := plan(w, records{})
	want := records{
		"pv-1": {Namespace: "default", Name: "a", PV: "pv-1", Phase: PhaseBound},
		"pv-2": {Namespace: "default", Name: "b", PV: "pv-2", Phase: PhaseBound},
	}
	if !maps.Equal(o.recs, want) {
		t.Errorf("records %v, want %v", o.recs, want)
	}
	if why := o.pending[claimKey{namespace: "default", name: "c"}]; why == "" {
		t.Errorf("claim c has no reason for not being bound")
	}
}
