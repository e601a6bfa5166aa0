package binder

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/reclaim"
)

// provWorld is a world with the classes given, testProvisioner running, and
// one pod ("web") using claim "data" when used is set.
func provWorld(used bool, claims []*v1.PersistentVolumeClaim, pvs []*v1.PersistentVolume, classes ...*storagev1.StorageClass) world {
	w := planWorld(claims, pvs)
	w.classes, w.provisioners = classesByName(classes), map[string]bool{testProvisioner: true}
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
	provisioning := records{"pvc-u1": {Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: phaseProvisioning,
		Provisioning: &provisionIntent{Provisioner: testProvisioner, Claim: claim, Class: fast}}}
	tests := []struct {
		name    string
		w       world
		want    []string // PV names to provision
		pending string   // contained in claim data's pending reason; "" when it has none
		recs    records
	}{
		{"a used claim of a class this agent provisions: recorded first", provWorld(true, []*v1.PersistentVolumeClaim{claim}, nil, fast),
			[]string{"pvc-u1"}, `provisioning PersistentVolume "pvc-u1" (StorageClass "fast")`, provisioning},
		{"not used by a pod: not yet", provWorld(false, []*v1.PersistentVolumeClaim{claim}, nil, fast),
			nil, "", records{}},
		{"the class does not exist: waits", provWorld(true, []*v1.PersistentVolumeClaim{claim}, nil),
			nil, `StorageClass "fast" does not exist: no PersistentVolume fits claim default/data (none defined)`, records{}},
		{"a misspelt class: the nearest suggested, the cause first", provWorld(true, []*v1.PersistentVolumeClaim{claim}, nil,
			newClass("fast2"), newClass("slow")),
			nil, `StorageClass "fast" does not exist (did you mean "fast2"?): no PersistentVolume fits claim default/data (none defined)`, records{}},
		{"the class names a provisioner this agent does not run", provWorld(true, []*v1.PersistentVolumeClaim{claim}, nil,
			newClass("fast", classProvisioner("other.io/x"))),
			nil, `StorageClass "fast" names provisioner "other.io/x", which this agent does not run: no PersistentVolume fits claim default/data`, records{}},
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
			[]string{"pvc-u1"}, `provisioning PersistentVolume "pvc-u1" (StorageClass "fast") failed, retrying: disk full`, provisioning},
		{"made: recorded Bound with the PersistentVolume", withOps(provWorld(true, []*v1.PersistentVolumeClaim{claim}, nil, fast),
			opsState{made: map[string]*v1.PersistentVolume{"pvc-u1": made}}),
			nil, "", records{"pvc-u1": {Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: PhaseBound, Provisioned: made}}},
		{"made, the claim gone meanwhile: recorded Released, and moved aside", withOps(provWorld(false, nil, nil, fast),
			opsState{made: map[string]*v1.PersistentVolume{"pvc-u1": made}}),
			nil, "", records{"pvc-u1": {Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: PhaseReleased, Provisioned: made,
				ReleasedAt: planNow, Reclaim: reclaim.State{Step: reclaim.Aside, DeleteAfter: planNow.Add(10 * time.Minute)}}}},
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
	released := func(class *storagev1.StorageClass, step reclaim.State) record {
		return record{Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: PhaseReleased, ReleasedAt: planNow,
			Provisioned: provisionedPV(claim, class), Reclaim: step}
	}
	bound := func(r record) record {
		r.Phase, r.ReleasedAt, r.Reclaim = PhaseBound, time.Time{}, reclaim.State{}
		return r
	}
	inPlace := reclaim.State{}
	aside := reclaim.State{Step: reclaim.Aside, DeleteAfter: planNow.Add(time.Minute)}
	asideNew := reclaim.State{Step: reclaim.Aside, DeleteAfter: planNow.Add(10 * time.Minute)}
	due := reclaim.State{Step: reclaim.Aside, DeleteAfter: planNow}
	deleting := reclaim.State{Step: reclaim.Deleting}
	back := []*v1.PersistentVolumeClaim{claim}
	w := func(claims []*v1.PersistentVolumeClaim, s opsState) world {
		w := planWorld(claims, nil)
		w.classes, w.provisioners, w.ops = classesByName([]*storagev1.StorageClass{deleteClass}), map[string]bool{testProvisioner: true}, s
		return w
	}
	none := opsState{}
	moved := opsState{asided: map[string]bool{"pvc-u1": true}}
	tests := []struct {
		name    string
		w       world
		prev    record
		action  reclaim.Action // on pvc-u1, "" for none
		want    records
		pending string // contained in claim data's pending reason
	}{
		{"Delete, released: moved aside until now+delay", w(nil, none), released(deleteClass, inPlace),
			reclaim.MoveAside, records{"pvc-u1": released(deleteClass, asideNew)}, ""},
		{"Delete, released, still set up for a pod: kept", func() world { w := w(nil, none); w.inUse = func(string) bool { return true }; return w }(),
			released(deleteClass, inPlace), "", records{"pvc-u1": released(deleteClass, inPlace)}, ""},
		{"Delete, released, the claim back: bound again", w(back, none), released(deleteClass, inPlace),
			"", records{"pvc-u1": bound(released(deleteClass, inPlace))}, ""},
		{"Delete, aside, not moved since start: moved again", w(nil, none), released(deleteClass, aside),
			reclaim.MoveAside, records{"pvc-u1": released(deleteClass, aside)}, ""},
		{"Delete, aside, not due: waits", w(nil, moved), released(deleteClass, aside),
			"", records{"pvc-u1": released(deleteClass, aside)}, ""},
		{"Delete, aside and due: deleting", w(nil, moved), released(deleteClass, due),
			reclaim.Delete, records{"pvc-u1": released(deleteClass, deleting)}, ""},
		{"Delete, aside, the claim back: restored", w(back, moved), released(deleteClass, due),
			reclaim.Restore, records{"pvc-u1": released(deleteClass, due)}, `the PersistentVolume "pvc-u1" it released is being restored`},
		{"Delete, aside, the claim back, restored: bound again", w(back, opsState{restored: map[string]bool{"pvc-u1": true}}),
			released(deleteClass, aside), "", records{"pvc-u1": bound(released(deleteClass, aside))}, ""},
		{"Delete, deleting, the claim back: never bound again, deletion finished", w(back, none), released(deleteClass, deleting),
			reclaim.Delete, records{"pvc-u1": released(deleteClass, deleting)}, `the PersistentVolume "pvc-u1" it released is being deleted`},
		{"Delete, deleted: the record dropped", w(nil, opsState{deleted: map[string]bool{"pvc-u1": true}}), released(deleteClass, deleting),
			"", records{}, ""},
		{"Delete, provisioner not run: kept", func() world { w := w(nil, none); w.provisioners = nil; return w }(),
			released(deleteClass, inPlace), "", records{"pvc-u1": released(deleteClass, inPlace)}, ""},
		{"Delete, aside, provisioner not run, the claim back: waits", func() world { w := w(back, none); w.provisioners = nil; return w }(),
			released(deleteClass, aside), "", records{"pvc-u1": released(deleteClass, aside)}, "does not run its provisioner"},
		{"Retain: kept", w(nil, none), released(retainClass, inPlace), "", records{"pvc-u1": released(retainClass, inPlace)}, ""},
		{"Retain, the claim back: bound again", w(back, none), released(retainClass, inPlace),
			"", records{"pvc-u1": bound(released(retainClass, inPlace))}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.w.pods = []*v1.Pod{podUsing("web", "data")}
			if len(tt.w.claims) == 0 {
				tt.w.pods = nil
			}
			prev := records{tt.prev.PV: tt.prev}
			o := plan(tt.w, prev)
			var action reclaim.Action
			for _, op := range o.storage {
				if op.pv.Name != "pvc-u1" || op.provisioner != testProvisioner || action != "" {
					t.Errorf("unexpected operation %+v", op)
				}
				action = op.action
			}
			if action != tt.action {
				t.Errorf("action %q, want %q", action, tt.action)
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

// A claim that names its PersistentVolume, or has a selector, is never
// provisioned: the PV controller waits for the named PV, and external
// provisioners refuse selectors.
func TestPlanNeverProvisionsNamedOrSelectingClaims(t *testing.T) {
	fast := newClass("fast")
	for name, claim := range map[string]*v1.PersistentVolumeClaim{
		"spec.volumeName": newClaim("data", "1Gi", claimUID("u1"), claimClass("fast"), func(c *v1.PersistentVolumeClaim) { c.Spec.VolumeName = "pv-later" }),
		"selector": newClaim("data", "1Gi", claimUID("u1"), claimClass("fast"), func(c *v1.PersistentVolumeClaim) {
			c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"disk": "ssd"}}
		}),
		"volumeAttributesClassName": newClaim("data", "1Gi", claimUID("u1"), claimClass("fast"), func(c *v1.PersistentVolumeClaim) {
			gold := "gold"
			c.Spec.VolumeAttributesClassName = &gold
		}),
	} {
		t.Run(name, func(t *testing.T) {
			o := plan(provWorld(true, []*v1.PersistentVolumeClaim{claim}, nil, fast), records{})
			if len(o.provisions) != 0 {
				t.Errorf("provisions %+v, want none", o.provisions)
			}
			if why := o.pending[keyOf(claim)]; !strings.Contains(why, "never provisioned") {
				t.Errorf("pending reason %q, want it to say why it is never provisioned", why)
			}
		})
	}
}

// A manifest claim without metadata.uid gets a PersistentVolume name derived
// from its namespace, its name and the node: the same at every pass and
// restart, another on another node (which may share the storage root).
func TestPVNameForClaimWithoutUID(t *testing.T) {
	a, err := pvNameFor(newClaim("data", "1Gi"), "node-1")
	b, _ := pvNameFor(newClaim("data", "2Gi"), "node-1")
	c, _ := pvNameFor(newClaim("other", "1Gi"), "node-1")
	d, _ := pvNameFor(newClaim("data", "1Gi"), "node-2")
	if err != nil || a != b || a == c || a == d || !strings.HasPrefix(a, "pvc-") || len(a) != len("pvc-")+36 {
		t.Errorf("names %q, %q, %q, %q, %v; want pvc-<uuid>, by node, namespace and name", a, b, c, d, err)
	}
	if got, _ := pvNameFor(newClaim("data", "1Gi", claimUID("u1")), "node-1"); got != "pvc-u1" {
		t.Errorf("with a UID: %q, want pvc-u1", got)
	}
}

func withOps(w world, s opsState) world { w.ops = s; return w }

// equalRecords compares records, provisioned PersistentVolumes and
// provisionings by content.
func equalRecords(a, b records) bool {
	return maps.EqualFunc(a, b, func(x, y record) bool {
		px, py := x.Provisioned, y.Provisioned
		ix, iy := x.Provisioning, y.Provisioning
		x.Provisioned, y.Provisioned, x.Provisioning, y.Provisioning = nil, nil, nil, nil
		return x == y && equality.Semantic.DeepEqual(px, py) && equality.Semantic.DeepEqual(ix, iy)
	})
}

// What becomes of a provisioning recorded by an earlier pass (or before a
// crash): asked for again until its result is recorded, whatever the
// source holds.
func TestPlanRecordedProvisioning(t *testing.T) {
	fast := newClass("fast")
	claim := newClaim("data", "1Gi", claimUID("u1"), claimClass("fast"))
	made := provisionedPV(claim, fast)
	prev := records{"pvc-u1": {Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: phaseProvisioning,
		Provisioning: &provisionIntent{Provisioner: testProvisioner, Claim: claim, Class: fast}}}
	claims := []*v1.PersistentVolumeClaim{claim}
	fits := []*v1.PersistentVolume{newPV("pv-a", "1Gi", pvClass("fast"))}
	tests := []struct {
		name    string
		w       world
		want    []string // PV names to provision
		pending string
		recs    records
	}{
		{"the claim used: asked for again", provWorld(true, claims, nil, fast), []string{"pvc-u1"},
			`provisioning PersistentVolume "pvc-u1" (StorageClass "fast")`, prev},
		{"the claim used, and a PersistentVolume fits now: still provisioned", provWorld(true, claims, fits, fast), []string{"pvc-u1"},
			`provisioning PersistentVolume "pvc-u1" (StorageClass "fast")`, prev},
		{"the claim gone: asked for again all the same", provWorld(false, nil, nil, fast), []string{"pvc-u1"}, "", prev},
		{"the class gone: asked for with the class recorded", provWorld(true, claims, nil), []string{"pvc-u1"}, "provisioning", prev},
		{"its provisioner not run here: waits", withProvisioners(provWorld(true, claims, nil, fast)), nil, "provisioning", prev},
		{"failed, the claim used: retried", withOps(provWorld(true, claims, nil, fast), opsState{failed: map[string]string{"pvc-u1": "disk full"}}),
			[]string{"pvc-u1"}, "failed, retrying: disk full", prev},
		{"failed, the claim gone: dropped", withOps(provWorld(false, nil, nil, fast), opsState{failed: map[string]string{"pvc-u1": "disk full"}}),
			nil, "", records{}},
		{"made: recorded Bound in its place", withOps(provWorld(true, claims, nil, fast), opsState{made: map[string]*v1.PersistentVolume{"pvc-u1": made}}),
			nil, "", records{"pvc-u1": {Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: PhaseBound, Provisioned: made}}},
		{"made, the claim gone: recorded Released", withOps(provWorld(false, nil, nil, fast), opsState{made: map[string]*v1.PersistentVolume{"pvc-u1": made}}),
			nil, "", records{"pvc-u1": {Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: PhaseReleased, Provisioned: made,
				ReleasedAt: planNow, Reclaim: reclaim.State{Step: reclaim.Aside, DeleteAfter: planNow.Add(10 * time.Minute)}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := plan(tt.w, prev)
			var names []string
			for _, p := range o.provisions {
				names = append(names, p.req.PVName)
				if p.req.Class != fast || p.req.Claim != claim {
					t.Errorf("provision %+v: not the recorded request", p)
				}
			}
			if !slices.Equal(names, tt.want) {
				t.Errorf("provisions %v, want %v", names, tt.want)
			}
			why := o.pending[keyOf(claim)]
			if tt.pending == "" && why != "" || !strings.Contains(why, tt.pending) {
				t.Errorf("pending reason %q, want it to contain %q", why, tt.pending)
			}
			if !equalRecords(o.recs, tt.recs) {
				t.Errorf("records %v, want %v", o.recs, tt.recs)
			}
		})
	}
}

func withProvisioners(w world, names ...string) world {
	w.provisioners = map[string]bool{}
	for _, n := range names {
		w.provisioners[n] = true
	}
	return w
}

// A provisioning is told the PersistentVolumes the binder knows: those of
// the source and those it provisioned, the one just made among them, so
// that nfs-subdir refuses a pathPattern that nests with one of them.
func TestProvisionListsKnownPVs(t *testing.T) {
	fast := newClass("fast")
	first := newClaim("first", "1Gi", claimUID("u0"), claimClass("fast"))
	second := newClaim("data", "1Gi", claimUID("u1"), claimClass("fast"))
	made := provisionedPV(first, fast)
	static := newPV("pv-static", "1Gi", pvClass("other"))
	w := withOps(provWorld(true, []*v1.PersistentVolumeClaim{first, second}, []*v1.PersistentVolume{static}, fast),
		opsState{made: map[string]*v1.PersistentVolume{made.Name: made}})
	w.pods = []*v1.Pod{podUsing("web", "data"), podUsing("db", "first")}
	prev := records{"pvc-u1": {Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: phaseProvisioning,
		Provisioning: &provisionIntent{Provisioner: testProvisioner, Claim: second, Class: fast}}}
	o := plan(w, prev)
	if len(o.provisions) != 1 || o.provisions[0].req.PVs == nil {
		t.Fatalf("provisions %+v, want pvc-u1's, with the PersistentVolumes known", o.provisions)
	}
	var names []string
	for _, pv := range o.provisions[0].req.PVs() {
		names = append(names, pv.Name)
	}
	slices.Sort(names)
	if want := []string{"pv-static", made.Name}; !slices.Equal(names, want) {
		t.Errorf("the provisioning is told %v, want %v", names, want)
	}
}
