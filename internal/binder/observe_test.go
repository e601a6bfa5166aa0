package binder

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

func TestObserve(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	data, other := newClaim("data", "1Gi"), newClaim("other", "1Gi")
	kData := keyOf(data)
	recs := records{"pv-a": {Namespace: "default", Name: "data", PV: "pv-a", Phase: PhaseBound}}
	at := func(d time.Duration, claims []*v1.PersistentVolumeClaim, pvs []*v1.PersistentVolume, pods []*v1.Pod) world {
		return world{now: t0.Add(d), claims: claims, pvs: pvs, pods: pods}
	}
	pvA := []*v1.PersistentVolume{newPV("pv-a", "1Gi")}

	// Missing at start: never seen, so never gone.
	o := observe(observations{}, at(0, []*v1.PersistentVolumeClaim{other}, nil, nil), recs)
	if o.claimsSeen[kData] || !o.claimsGone[kData].IsZero() {
		t.Fatalf("a claim missing at start: %+v", o)
	}
	// Seen, then missing: gone since the first pass that missed it.
	o = observe(o, at(time.Second, []*v1.PersistentVolumeClaim{data, other}, pvA, nil), recs)
	o = observe(o, at(2*time.Second, []*v1.PersistentVolumeClaim{other}, pvA, nil), recs)
	o = observe(o, at(3*time.Second, []*v1.PersistentVolumeClaim{other}, pvA, nil), recs)
	if got := o.claimsGone[kData]; !got.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("gone since %v, want %v", got, t0.Add(2*time.Second))
	}
	// The source emptied: nothing is gone, and the clock starts again after.
	o = observe(o, at(4*time.Second, nil, nil, nil), recs)
	if !o.emptied || len(o.claimsGone) != 0 || len(o.pvsGone) != 0 || !o.claimsSeen[kData] {
		t.Errorf("emptied: %+v; want nothing gone, what was seen kept", o)
	}
	o = observe(o, at(5*time.Second, []*v1.PersistentVolumeClaim{other}, nil, nil), recs)
	if got := o.claimsGone[kData]; o.emptied || !got.Equal(t0.Add(5*time.Second)) {
		t.Errorf("refilled: gone since %v, emptied %v; want since %v", got, o.emptied, t0.Add(5*time.Second))
	}
	if got := o.pvsGone["pv-a"]; !got.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("pv-a gone since %v, want %v", got, t0.Add(5*time.Second))
	}
	// Back: not gone. A claim without a record and missing is forgotten.
	o = observe(o, at(6*time.Second, []*v1.PersistentVolumeClaim{data}, pvA, nil), recs)
	if !o.claimsGone[kData].IsZero() || !o.pvsGone["pv-a"].IsZero() {
		t.Errorf("back: %+v; want nothing gone", o)
	}
	if o = observe(o, at(7*time.Second, []*v1.PersistentVolumeClaim{data}, pvA, nil), recs); o.claimsSeen[keyOf(other)] {
		t.Errorf("claim other, missing and without a record, is still remembered")
	}
	// A pod alone, or a StorageClass alone, keeps the source from looking emptied.
	if o = observe(o, at(8*time.Second, nil, nil, []*v1.Pod{podUsing("web")}), recs); o.emptied {
		t.Error("a source listing a pod counts as emptied")
	}
	w := at(9*time.Second, nil, nil, nil)
	w.classes = classesByName([]*storagev1.StorageClass{newClass("fast")})
	if o = observe(o, w, recs); o.emptied {
		t.Error("a source listing a StorageClass counts as emptied")
	}
}
