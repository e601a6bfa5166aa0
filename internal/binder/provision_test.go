package binder

import (
	"maps"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// provWorld is a world with the classes given, testProvisioner running, and
// one pod ("web") using claim "data" when used is set.
func provWorld(used bool, claims []*v1.PersistentVolumeClaim, pvs []*v1.PersistentVolume, classes ...*storagev1.StorageClass) world {
	w := world{claims: claims, pvs: pvs, node: thisNode(nil, "node-1"),
		classes: classesByName(classes), provisioners: map[string]bool{testProvisioner: true}}
	if used {
		w.pods = []*v1.Pod{podUsing("web", "data")}
	}
	return w
}

// Which claims are provisioned, and why the others wait.
func TestPlanProvisions(t *testing.T) {
	fast := newClass("fast")
	claim := newClaim("data", "1Gi", claimUID("u1"), claimClass("fast"))
	made := provisionedPV(claim, fast)
	tests := []struct {
		name    string
		w       world
		want    []string // PV names to provision
		pending string   // contained in claim data's pending reason; "" when it has none
		recs    records
	}{
		{"a used claim of a class this agent provisions", provWorld(true, []*v1.PersistentVolumeClaim{claim}, nil, fast),
			[]string{"pvc-u1"}, `provisioning PersistentVolume "pvc-u1" (StorageClass "fast")`, records{}},
		{"not used by a pod: not yet", provWorld(false, []*v1.PersistentVolumeClaim{claim}, nil, fast),
			nil, "", records{}},
		{"the class does not exist: waits", provWorld(true, []*v1.PersistentVolumeClaim{claim}, nil),
			nil, `no PersistentVolume fits claim default/data (none defined); StorageClass "fast" does not exist`, records{}},
		{"the class names a provisioner this agent does not run", provWorld(true, []*v1.PersistentVolumeClaim{claim}, nil,
			newClass("fast", classProvisioner("other.io/x"))),
			nil, `StorageClass "fast" names provisioner "other.io/x", which this agent does not run`, records{}},
		{"no class: never provisioned", provWorld(true, []*v1.PersistentVolumeClaim{newClaim("data", "1Gi", claimUID("u1"))}, nil, fast),
			nil, "no PersistentVolume fits", records{}},
		{"a PersistentVolume fits: bound, not provisioned",
			provWorld(true, []*v1.PersistentVolumeClaim{claim}, []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvClass("fast"))}, fast),
			nil, "", records{"pv-a": {Namespace: "default", Name: "data", UID: "u1", PV: "pv-a", Phase: PhaseBound}}},
		{"a UID that makes no PersistentVolume name", provWorld(true,
			[]*v1.PersistentVolumeClaim{newClaim("data", "1Gi", claimUID("U_1"), claimClass("fast"))}, nil, fast),
			nil, `metadata.uid "U_1" does not make a valid PersistentVolume name "pvc-U_1"`, records{}},
		{"running: waits, even when a PersistentVolume fits now", withOps(
			provWorld(true, []*v1.PersistentVolumeClaim{claim}, []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvClass("fast"))}, fast),
			opsState{running: map[string]bool{"pvc-u1": true}}),
			nil, `provisioning PersistentVolume "pvc-u1"`, records{}},
		{"failed: retried, the error as the reason", withOps(provWorld(true, []*v1.PersistentVolumeClaim{claim}, nil, fast),
			opsState{failed: map[string]string{"pvc-u1": "disk full"}}),
			[]string{"pvc-u1"}, `provisioning PersistentVolume "pvc-u1" (StorageClass "fast") failed, retrying: disk full`, records{}},
		{"made: recorded Bound with the PersistentVolume", withOps(provWorld(true, []*v1.PersistentVolumeClaim{claim}, nil, fast),
			opsState{made: map[string]*v1.PersistentVolume{"pvc-u1": made}}),
			nil, "", records{"pvc-u1": {Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: PhaseBound, Provisioned: made}}},
		{"made, the claim gone meanwhile: recorded Released, then deleted", withOps(provWorld(false, nil, nil, fast),
			opsState{made: map[string]*v1.PersistentVolume{"pvc-u1": made}}),
			nil, "", records{"pvc-u1": {Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: PhaseReleased, Provisioned: made}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := plan(tt.w, records{})
			var names []string
			for _, p := range o.provisions {
				names = append(names, p.req.PVName)
				if p.provisioner != testProvisioner || p.req.Class.Name != "fast" || p.req.SelectedNode != "node-1" || p.req.Claim.Name != "data" {
					t.Errorf("provision %+v", p)
				}
			}
			if !slices.Equal(names, tt.want) {
				t.Errorf("provisions %v, want %v", names, tt.want)
			}
			var why string
			if len(tt.w.claims) > 0 {
				why = o.pending[keyOf(tt.w.claims[0])]
			}
			if tt.pending == "" && why != "" || !strings.Contains(why, tt.pending) {
				t.Errorf("pending reason %q, want it to contain %q", why, tt.pending)
			}
			if !equalRecords(o.recs, tt.recs) {
				t.Errorf("records %v, want %v", o.recs, tt.recs)
			}
		})
	}
}

// What becomes of a provisioned PersistentVolume once its claim released it.
func TestPlanReclaims(t *testing.T) {
	claim := newClaim("data", "1Gi", claimUID("u1"), claimClass("fast"))
	deleteClass, retainClass := newClass("fast"), newClass("fast", classRetain)
	released := func(class *storagev1.StorageClass) record {
		return record{Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: PhaseReleased, Provisioned: provisionedPV(claim, class)}
	}
	bound := func(r record) record { r.Phase = PhaseBound; return r }
	tests := []struct {
		name    string
		w       world
		prev    record
		deletes bool
		want    records
		pending string // contained in claim data's pending reason
	}{
		{"Delete, no pod names the claim: deleted", provWorld(false, nil, nil), released(deleteClass), true,
			records{"pvc-u1": released(deleteClass)}, ""},
		{"Delete, a pod still names the claim: kept", provWorld(true, nil, nil), released(deleteClass), false,
			records{"pvc-u1": released(deleteClass)}, ""},
		{"Delete, bound: kept", provWorld(true, []*v1.PersistentVolumeClaim{claim}, nil), bound(released(deleteClass)), false,
			records{"pvc-u1": bound(released(deleteClass))}, ""},
		{"Delete, the claim gone: released, and deleted", provWorld(false, nil, nil), bound(released(deleteClass)), true,
			records{"pvc-u1": released(deleteClass)}, ""},
		{"Retain: kept", provWorld(false, nil, nil), released(retainClass), false,
			records{"pvc-u1": released(retainClass)}, ""},
		{"Retain, the claim back: bound again", provWorld(true, []*v1.PersistentVolumeClaim{claim}, nil), released(retainClass), false,
			records{"pvc-u1": bound(released(retainClass))}, ""},
		{"Delete, the claim back before any deletion: bound again", provWorld(true, []*v1.PersistentVolumeClaim{claim}, nil),
			released(deleteClass), false, records{"pvc-u1": bound(released(deleteClass))}, ""},
		{"Delete, running: nothing more", withOps(provWorld(false, nil, nil), opsState{running: map[string]bool{"pvc-u1": true}}),
			released(deleteClass), false, records{"pvc-u1": released(deleteClass)}, ""},
		{"Delete, deleted: the record dropped", withOps(provWorld(false, nil, nil), opsState{deleted: map[string]bool{"pvc-u1": true}}),
			released(deleteClass), false, records{}, ""},
		{"Delete failed, the claim back and used: never bound again, deletion retried",
			withOps(provWorld(true, []*v1.PersistentVolumeClaim{claim}, nil, deleteClass), opsState{failed: map[string]string{"pvc-u1": "busy"}}),
			released(deleteClass), true, records{"pvc-u1": released(deleteClass)}, `the PersistentVolume "pvc-u1" it released is being deleted`},
		{"Delete, provisioner not run: kept", func() world { w := provWorld(false, nil, nil); w.provisioners = nil; return w }(),
			released(deleteClass), false, records{"pvc-u1": released(deleteClass)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := records{tt.prev.PV: tt.prev}
			o := plan(tt.w, prev)
			if got := len(o.deletes) == 1 && o.deletes[0].pv.Name == "pvc-u1" && o.deletes[0].provisioner == testProvisioner; got != tt.deletes || len(o.deletes) > 1 {
				t.Errorf("deletes %+v, want a deletion of pvc-u1: %v", o.deletes, tt.deletes)
			}
			if !equalRecords(o.recs, tt.want) {
				t.Errorf("records %v, want %v", o.recs, tt.want)
			}
			if why := o.pending[keyOf(claim)]; !strings.Contains(why, tt.pending) || tt.pending == "" && why != "" {
				t.Errorf("pending reason %q, want %q", why, tt.pending)
			}
			if len(o.provisions) > 0 {
				t.Errorf("provisions %+v, want none", o.provisions)
			}
			if !equalRecords(prev, records{tt.prev.PV: tt.prev}) {
				t.Errorf("plan modified its input: %v", prev)
			}
		})
	}
}

// A manifest claim without metadata.uid gets a PersistentVolume name derived
// from its namespace and name: the same at every pass and restart.
func TestPVNameForClaimWithoutUID(t *testing.T) {
	a, err := pvNameFor(newClaim("data", "1Gi"))
	b, _ := pvNameFor(newClaim("data", "2Gi"))
	c, _ := pvNameFor(newClaim("other", "1Gi"))
	if err != nil || a != b || a == c || !strings.HasPrefix(a, "pvc-") || len(a) != len("pvc-")+36 {
		t.Errorf("names %q, %q, %q, %v; want pvc-<uuid>, by namespace and name", a, b, c, err)
	}
	if got, _ := pvNameFor(newClaim("data", "1Gi", claimUID("u1"))); got != "pvc-u1" {
		t.Errorf("with a UID: %q, want pvc-u1", got)
	}
}

func withOps(w world, s opsState) world { w.ops = s; return w }

// equalRecords compares records, provisioned PersistentVolumes by content.
func equalRecords(a, b records) bool {
	return maps.EqualFunc(a, b, func(x, y record) bool {
		px, py := x.Provisioned, y.Provisioned
		x.Provisioned, y.Provisioned = nil, nil
		return x == y && equality.Semantic.DeepEqual(px, py)
	})
}
