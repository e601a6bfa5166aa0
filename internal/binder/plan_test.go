package binder

import (
	"maps"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/evidence"
)

// planNow is the time of the plan tests' passes.
var planNow = time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)

// planWorld is a world at planNow, settle time 1 s, reclaim delay 10 min,
// its source listing objects for an hour.
func planWorld(claims []*v1.PersistentVolumeClaim, pvs []*v1.PersistentVolume) world {
	return world{claims: claims, pvs: pvs, node: thisNode(nil, "node-1"), now: planNow, settle: time.Second, delay: 10 * time.Minute,
		listing: evidence.Listing{Source: "manifests", Synced: true, Since: planNow.Add(-time.Hour)},
		obs:     observations{claimsSeen: map[claimKey]bool{}, pvsSeen: map[string]bool{}, claimsGone: map[claimKey]time.Time{}, pvsGone: map[string]time.Time{}}}
}

// listingSince has w's source list objects since ago; 0: it lists none.
func listingSince(w world, ago time.Duration) world {
	w.listing.Since = time.Time{}
	if ago > 0 {
		w.listing.Since = w.now.Add(-ago)
	}
	return w
}

// claimGone records that the driver saw claim k and has missed it for ago.
func claimGone(w world, k claimKey, ago time.Duration) world {
	w.obs.claimsSeen[k] = true
	w.obs.claimsGone[k] = w.now.Add(-ago)
	return w
}

// pvGone records that the driver saw PV name and has missed it for ago.
func pvGone(w world, name string, ago time.Duration) world {
	w.obs.pvsSeen[name] = true
	w.obs.pvsGone[name] = w.now.Add(-ago)
	return w
}

// TestPlanSettlesRecords has one row per thing that can happen to a
// record's claim or PersistentVolume. No pod uses the claims, so plan
// binds nothing new.
func TestPlanSettlesRecords(t *testing.T) {
	bound := record{Namespace: "default", Name: "data", UID: "u1", PV: "pv-a", Phase: PhaseBound}
	released := bound
	released.Phase, released.ReleasedAt = PhaseReleased, planNow
	claim := newClaim("data", "1Gi", claimUID("u1"))
	k := keyOf(claim)
	pvA := []*v1.PersistentVolume{newPV("pv-a", "1Gi")}
	other := []*v1.PersistentVolumeClaim{newClaim("other", "1Gi")} // keeps the source from looking emptied
	emptied := func(w world) world { w.obs.emptied = true; return w }
	inUse := func(w world) world { w.inUse = func(pv string) bool { return pv == "pv-a" }; return w }
	usedByPod := func(w world) world { w.pods = []*v1.Pod{podUsing("web", "data")}; return w }
	tests := []struct {
		name string
		w    world
		prev record
		want records
		held string    // in the claim's held reason
		due  time.Time // when a pass is due
		busy bool      // waits for a teardown
	}{
		{"bound, claim and PV here: kept", planWorld([]*v1.PersistentVolumeClaim{claim}, pvA),
			bound, records{"pv-a": bound}, "", time.Time{}, false},
		{"bound, claim removed for the settle time: released", claimGone(planWorld(other, pvA), k, time.Second),
			bound, records{"pv-a": released}, "", time.Time{}, false},
		{"bound, claim missing since start, the source listing for the settle time: released", planWorld(other, pvA),
			bound, records{"pv-a": released}, "", time.Time{}, false},
		{"bound, claim missing since start, the source listing for less: kept until then", listingSince(planWorld(other, pvA), 300*time.Millisecond),
			bound, records{"pv-a": bound}, "absent since start, while its source, manifests, has listed objects since 07:59:59.700",
			planNow.Add(700 * time.Millisecond), false},
		{"bound, claim missing since start, the source listing nothing: kept", listingSince(planWorld(nil, nil), 0),
			bound, records{"pv-a": bound}, "has listed nothing since", time.Time{}, false},
		{"bound, claim removed for less than the settle time: kept until then", claimGone(planWorld(other, pvA), k, 300*time.Millisecond),
			bound, records{"pv-a": bound}, "removed since 07:59:59.700", planNow.Add(700 * time.Millisecond), false},
		{"bound, claim removed, the source emptied: kept", emptied(claimGone(planWorld(nil, nil), k, time.Hour)),
			bound, records{"pv-a": bound}, "emptied directory never releases", time.Time{}, false},
		{"bound, claim removed, a pod still names it: kept", usedByPod(claimGone(planWorld(other, pvA), k, time.Hour)),
			bound, records{"pv-a": bound}, "a pod that is not terminated still names it", time.Time{}, false},
		{"bound, claim removed, the PV still set up for a pod: kept", inUse(claimGone(planWorld(other, pvA), k, time.Hour)),
			bound, records{"pv-a": bound}, "still set up for a pod", time.Time{}, true},
		{"bound, claim replaced by one with another UID: released",
			claimGone(planWorld([]*v1.PersistentVolumeClaim{newClaim("data", "1Gi", claimUID("u2"))}, pvA), k, time.Hour),
			bound, records{"pv-a": released}, "", time.Time{}, false},
		{"bound, PV gone: kept (Lost)", planWorld([]*v1.PersistentVolumeClaim{claim}, nil),
			bound, records{"pv-a": bound}, "", time.Time{}, false},
		{"bound, claim and PV removed: released, not dropped", claimGone(pvGone(planWorld(other, nil), "pv-a", time.Minute), k, time.Hour),
			bound, records{"pv-a": released}, "", planNow.Add(9 * time.Minute), false},
		{"released, claim back with its UID: bound again", planWorld([]*v1.PersistentVolumeClaim{claim}, pvA),
			released, records{"pv-a": bound}, "", time.Time{}, false},
		{"released, a claim of the same name with another UID: still released",
			planWorld([]*v1.PersistentVolumeClaim{newClaim("data", "1Gi", claimUID("u2"))}, pvA),
			released, records{"pv-a": released}, "", time.Time{}, false},
		{"released, PV removed for less than the reclaim delay: kept until then", pvGone(planWorld(other, nil), "pv-a", time.Minute),
			released, records{"pv-a": released}, "", planNow.Add(9 * time.Minute), false},
		{"released, PV removed for the reclaim delay: dropped", pvGone(planWorld(other, nil), "pv-a", 10*time.Minute),
			released, records{}, "", time.Time{}, false},
		{"released, PV missing since start: kept", planWorld(other, nil),
			released, records{"pv-a": released}, "", time.Time{}, false},
		{"released, PV removed, the source emptied: kept", emptied(pvGone(planWorld(nil, nil), "pv-a", time.Hour)),
			released, records{"pv-a": released}, "", time.Time{}, false},
		{"released, PV removed, the claim back: bound again (Lost until the PV is back)",
			pvGone(planWorld([]*v1.PersistentVolumeClaim{claim}, nil), "pv-a", time.Hour),
			released, records{"pv-a": bound}, "", time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := records{tt.prev.PV: tt.prev}
			o := plan(tt.w, prev)
			if !maps.Equal(o.recs, tt.want) {
				t.Errorf("records %v, want %v", o.recs, tt.want)
			}
			if why := o.held[k]; !strings.Contains(why, tt.held) || tt.held == "" && why != "" {
				t.Errorf("held reason %q, want it to contain %q", why, tt.held)
			}
			if !o.due.Equal(tt.due) {
				t.Errorf("due %v, want %v", o.due, tt.due)
			}
			if o.waitsOnUse != tt.busy {
				t.Errorf("waitsOnUse %v, want %v", o.waitsOnUse, tt.busy)
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
