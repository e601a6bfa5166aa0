package binder

import (
	"context"

	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/volume-agent/volume-agent/internal/provisioner"
)

func classExpandable(sc *storagev1.StorageClass) {
	yes := true
	sc.AllowVolumeExpansion = &yes
}

// Which bound claims are expanded, and why the others keep their size.
func TestPlanExpands(t *testing.T) {
	grow, fixed := newClass("grow", classExpandable), newClass("fixed")
	made := provisionedPV(newClaim("data", "1Gi", claimUID("u1"), claimClass("grow")), grow)
	madeFixed := provisionedPV(newClaim("data", "1Gi", claimUID("u1"), claimClass("fixed")), fixed)
	bound := func(pv *v1.PersistentVolume, expandTo string) records {
		return records{"pvc-u1": {Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: PhaseBound, Provisioned: pv, ExpandTo: expandTo}}
	}
	asking := func(size, class string) []*v1.PersistentVolumeClaim {
		return []*v1.PersistentVolumeClaim{newClaim("data", size, claimUID("u1"), claimClass(class))}
	}
	grown := made.DeepCopy()
	grown.Spec.Capacity[v1.ResourceStorage] = resource.MustParse("2Gi")
	tests := []struct {
		name     string
		w        world
		prev     records
		expandTo string // the record's ExpandTo after the pass
		capacity string // its PersistentVolume's capacity after the pass
		op       string // the size of the expandOp asked for; "" for none
		reason   string // contained in the claim's resizing reason; "" when it has none
		refused  bool
	}{
		{"the same size: nothing", provWorld(true, asking("1Gi", "grow"), nil, grow), bound(made, ""), "", "1Gi", "", "", false},
		{"more: recorded, then grown", provWorld(true, asking("2Gi", "grow"), nil, grow), bound(made, ""),
			"2Gi", "1Gi", "2Gi", `expanding PersistentVolume "pvc-u1" from 1Gi to 2Gi`, false},
		{"more, not used by a pod: grown too", provWorld(false, asking("2Gi", "grow"), nil, grow), bound(made, ""),
			"2Gi", "1Gi", "2Gi", "expanding", false},
		{"less: refused", provWorld(true, asking("512Mi", "grow"), nil, grow), bound(made, ""),
			"", "1Gi", "", `spec.resources.requests.storage 512Mi is below the capacity 1Gi of PersistentVolume "pvc-u1": a volume only grows`, true},
		{"a class without allowVolumeExpansion: refused", provWorld(true, asking("2Gi", "fixed"), nil, fixed), bound(madeFixed, ""),
			"", "1Gi", "", `StorageClass "fixed" does not allow volume expansion (allowVolumeExpansion)`, true},
		{"a class that is gone: refused", provWorld(true, asking("2Gi", "grow"), nil), bound(made, ""),
			"", "1Gi", "", `StorageClass "grow" does not exist`, true},
		{"recorded after a restart: grown again", provWorld(true, asking("2Gi", "grow"), nil, grow), bound(made, "2Gi"),
			"2Gi", "1Gi", "2Gi", "expanding", false},
		{"more again while growing: the larger size", provWorld(true, asking("3Gi", "grow"), nil, grow), bound(made, "2Gi"),
			"3Gi", "1Gi", "3Gi", "to 3Gi", false},
		{"less than the size being grown to: refused, the growth goes on", provWorld(true, asking("1536Mi", "grow"), nil, grow), bound(made, "2Gi"),
			"2Gi", "1Gi", "2Gi", "is below the size 2Gi", true},
		{"failed: retried, the error as the reason", withOps(provWorld(true, asking("2Gi", "grow"), nil, grow),
			opsState{failed: map[string]string{"pvc-u1": "disk full"}}), bound(made, "2Gi"),
			"2Gi", "1Gi", "2Gi", "failed, retrying: disk full", false},
		{"grown: the capacity recorded", withOps(provWorld(true, asking("2Gi", "grow"), nil, grow),
			opsState{expanded: map[string]string{"pvc-u1": "2Gi"}}), bound(made, "2Gi"), "", "2Gi", "", "", false},
		{"grown to less than asked since: grown again", withOps(provWorld(true, asking("3Gi", "grow"), nil, grow),
			opsState{expanded: map[string]string{"pvc-u1": "2Gi"}}), bound(made, "3Gi"), "3Gi", "1Gi", "3Gi", "to 3Gi", false},
		{"a grown PersistentVolume: nothing more", provWorld(true, asking("2Gi", "grow"), nil, grow), bound(grown, ""), "", "2Gi", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.w.expanders = map[string]bool{testProvisioner: true}
			o := plan(tt.w, tt.prev)
			r := o.recs["pvc-u1"]
			if q := r.Provisioned.Spec.Capacity[v1.ResourceStorage]; r.ExpandTo != tt.expandTo || q.String() != tt.capacity {
				t.Errorf("record: expandTo %q, capacity %s; want %q, %s", r.ExpandTo, q.String(), tt.expandTo, tt.capacity)
			}
			var op string
			for _, e := range o.expansions {
				op = e.size.String()
			}
			if op != tt.op || len(o.expansions) > 1 {
				t.Errorf("expansions %v, want one of %q", o.expansions, tt.op)
			}
			rs := o.resizing[claimKey{namespace: "default", name: "data", uid: "u1"}]
			if (tt.reason == "") != (rs.why == "") || !strings.Contains(rs.why, tt.reason) || rs.refused != tt.refused {
				t.Errorf("resizing %+v, want %q (refused %t)", rs, tt.reason, tt.refused)
			}
			if made.Spec.Capacity.Storage().String() != "1Gi" {
				t.Error("plan modified a published PersistentVolume")
			}
		})
	}
}

// A provisioner that cannot expand: refused.
func TestPlanExpandNoExpander(t *testing.T) {
	grow := newClass("grow", classExpandable)
	made := provisionedPV(newClaim("data", "1Gi", claimUID("u1"), claimClass("grow")), grow)
	w := provWorld(true, []*v1.PersistentVolumeClaim{newClaim("data", "2Gi", claimUID("u1"), claimClass("grow"))}, nil, grow)
	o := plan(w, records{"pvc-u1": {Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: PhaseBound, Provisioned: made}})
	rs := o.resizing[claimKey{namespace: "default", name: "data", uid: "u1"}]
	if !rs.refused || !strings.Contains(rs.why, "cannot expand volumes") || len(o.expansions) != 0 {
		t.Errorf("resizing %+v, expansions %v", rs, o.expansions)
	}
}

// expandingProvisioner is a fakeProvisioner that expands, failing while told to.
type expandingProvisioner struct {
	fakeProvisioner
	xmu       sync.Mutex
	expandErr error   // guarded by xmu
	sizes     []int64 // guarded by xmu; of every Expand call
}

var _ provisioner.Expander = (*expandingProvisioner)(nil)

func (p *expandingProvisioner) Expand(_ context.Context, _ *v1.PersistentVolume, size int64) error {
	p.xmu.Lock()
	defer p.xmu.Unlock()
	p.sizes = append(p.sizes, size)
	return p.expandErr
}

// A bound claim whose manifest asks for more is expanded: the size is on
// disk before the provisioner is called, the capacity once it succeeded;
// a failure is retried and shown meanwhile; less is refused.
func TestExpandsAClaim(t *testing.T) {
	prov := &expandingProvisioner{expandErr: errDiskFull}
	path := statePath(t)
	h := startWith(t, provInner(classExpandable), path, []provisioner.Provisioner{prov}, fastRetry)
	h.expect("bound", h.boundTo("data", "pvc-u1"))
	h.update(func(f *fakeInner) {
		f.claims = []*v1.PersistentVolumeClaim{newClaim("data", "2Gi", claimUID("u1"), claimClass("fast"))}
	},
		"expansion failing", func() bool {
			return strings.Contains(h.claimStatus("data")[0].Error, "failed, retrying: expand the storage")
		})
	if recs, err := newStore(path).load(); err != nil || recs["pvc-u1"].ExpandTo != "2Gi" {
		t.Fatalf("state file %v, %v: want the expansion recorded before it is made", recs, err)
	}
	if c := h.claim("data"); c.Status.Capacity.Storage().String() != "1Gi" || c.Status.AllocatedResources.Storage().String() != "2Gi" ||
		len(c.Status.Conditions) != 1 || c.Status.Conditions[0].Type != v1.PersistentVolumeClaimResizing {
		t.Errorf("claim status while expanding %+v", c.Status)
	}
	prov.xmu.Lock()
	prov.expandErr = nil
	prov.xmu.Unlock()
	h.expect("expanded", func() bool { return h.claimStatus("data")[0].Capacity == "2Gi" })
	if cs := h.claimStatus("data")[0]; cs.Error != "" {
		t.Errorf("error %q once expanded", cs.Error)
	}
	if c := h.claim("data"); len(c.Status.Conditions) != 0 {
		t.Errorf("conditions %+v once expanded", c.Status.Conditions)
	}
	if recs, err := newStore(path).load(); err != nil || recs["pvc-u1"].ExpandTo != "" || recs["pvc-u1"].Provisioned.Spec.Capacity.Storage().String() != "2Gi" {
		t.Fatalf("state file %v, %v: want the capacity recorded", recs, err)
	}
	prov.xmu.Lock()
	if n := len(prov.sizes); n < 2 || prov.sizes[n-1] != 2<<30 {
		t.Errorf("Expand calls %v", prov.sizes)
	}
	prov.xmu.Unlock()
	h.update(func(f *fakeInner) {
		f.claims = []*v1.PersistentVolumeClaim{newClaim("data", "1Gi", claimUID("u1"), claimClass("fast"))}
	},
		"shrink refused", func() bool { return strings.Contains(h.claimStatus("data")[0].Error, "a volume only grows") })
	if cs := h.claimStatus("data")[0]; cs.Capacity != "2Gi" || cs.Phase != PhaseBound {
		t.Errorf("after a refused shrink %+v", cs)
	}
	if h.logs.FilterMessage("claim expansion refused").Len() != 1 {
		t.Errorf("want one warning for the refusal")
	}
}

// An expansion recorded before a crash is finished after the restart,
// whatever the manifest says meanwhile: the record, not the claim, says
// what was asked for, and the volume never shrinks.
func TestRecordedExpansionFinishedAfterRestart(t *testing.T) {
	path := statePath(t)
	failing := &expandingProvisioner{expandErr: errDiskFull}
	h := startWith(t, provInner(classExpandable), path, []provisioner.Provisioner{failing}, fastRetry)
	h.expect("bound", h.boundTo("data", "pvc-u1"))
	h.update(func(f *fakeInner) {
		f.claims = []*v1.PersistentVolumeClaim{newClaim("data", "2Gi", claimUID("u1"), claimClass("fast"))}
	},
		"expansion failing", func() bool { return strings.Contains(h.claimStatus("data")[0].Error, "failed, retrying") })
	h.stop()

	prov := &expandingProvisioner{}
	h = startWith(t, provInner(classExpandable), path, []provisioner.Provisioner{prov}, fastRetry) // the claim at 1Gi again
	h.expect("expanded to the recorded size, the lower request refused", func() bool {
		cs := h.claimStatus("data")[0]
		return cs.Capacity == "2Gi" && strings.Contains(cs.Error, "a volume only grows")
	})
	prov.xmu.Lock()
	defer prov.xmu.Unlock()
	if len(prov.sizes) == 0 || prov.sizes[0] != 2<<30 {
		t.Errorf("Expand calls %v, want 2Gi", prov.sizes)
	}
}
