package binder

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/volume"
)

func statePath(t *testing.T) string { return filepath.Join(t.TempDir(), "claims.json") }

// Claims are bound only once a pod that is not terminated uses them
// (WaitForFirstConsumer); the views are what the PV controller would leave.
func TestBindsOnlyClaimsUsedByPods(t *testing.T) {
	inner := newFakeInner()
	inner.pvs = []*v1.PersistentVolume{newPV("pv-small", "1Gi"), newPV("pv-big", "10Gi")}
	inner.claims = []*v1.PersistentVolumeClaim{newClaim("used", "2Gi", claimUID("u1")), newClaim("idle", "1Gi"), newClaim("done", "1Gi")}
	finished := podUsing("finished", "done")
	finished.Status.Phase = v1.PodSucceeded
	inner.pods = []*v1.Pod{podUsing("web", "used"), finished}
	h := start(t, inner, statePath(t))
	h.expect("the binder synced", h.synced)

	c := h.claim("used")
	if c.Spec.VolumeName != "pv-big" || c.Status.Phase != v1.ClaimBound ||
		c.Annotations["pv.kubernetes.io/bind-completed"] != "yes" || c.Annotations["pv.kubernetes.io/bound-by-controller"] != "yes" {
		t.Errorf("claim used: volumeName %q, phase %s, annotations %v; want Bound to pv-big by the controller",
			c.Spec.VolumeName, c.Status.Phase, c.Annotations)
	}
	if q := c.Status.Capacity[v1.ResourceStorage]; q.String() != "10Gi" || !slices.Equal(c.Status.AccessModes, []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}) {
		t.Errorf("claim used: status %+v; want the PV's capacity and access modes", c.Status)
	}
	pv := h.pv("pv-big")
	if ref := pv.Spec.ClaimRef; ref == nil || ref.Kind != "PersistentVolumeClaim" || ref.Namespace != "default" ||
		ref.Name != "used" || ref.UID != "u1" || pv.Status.Phase != v1.VolumeBound {
		t.Errorf("pv-big: claimRef %+v, phase %s; want Bound to default/used (u1)", pv.Spec.ClaimRef, pv.Status.Phase)
	}
	for _, name := range []string{"idle", "done"} {
		if c := h.claim(name); c.Spec.VolumeName != "" || c.Status.Phase != v1.ClaimPending {
			t.Errorf("claim %s: volumeName %q, phase %s; want Pending: no running pod uses it", name, c.Spec.VolumeName, c.Status.Phase)
		}
	}
	if pv := h.pv("pv-small"); pv.Spec.ClaimRef != nil || pv.Status.Phase != v1.VolumeAvailable {
		t.Errorf("pv-small: claimRef %+v, phase %s; want Available", pv.Spec.ClaimRef, pv.Status.Phase)
	}
	want := []ClaimStatus{
		{Namespace: "default", Name: "done", Phase: PhasePending},
		{Namespace: "default", Name: "idle", Phase: PhasePending},
		{Namespace: "default", Name: "used", Phase: PhaseBound, PV: "pv-big", Capacity: "10Gi", ReclaimPolicy: "Retain"},
	}
	if got := h.b.Claims(); !slices.Equal(got, want) {
		t.Errorf("Claims() = %+v, want %+v", got, want)
	}
	// Views are copies: the inner source's objects are as defined.
	for _, c := range inner.PersistentVolumeClaims() {
		if c.Spec.VolumeName != "" || c.Status.Phase != "" || c.Annotations != nil {
			t.Errorf("inner claim %s was modified: %+v", c.Name, c)
		}
	}
	for _, pv := range inner.PersistentVolumes() {
		if pv.Spec.ClaimRef != nil || pv.Status.Phase != "" || pv.Annotations != nil {
			t.Errorf("inner PersistentVolume %s was modified", pv.Name)
		}
	}
	if got := h.logs.FilterMessage("claim bound").FilterField(zap.String("claim", "default/used")).
		FilterField(zap.String("pv", "pv-big")).Len(); got != 1 {
		t.Errorf("%d \"claim bound\" logs for default/used and pv-big, want 1", got)
	}
	assertRecords(t, h.path, records{"pv-big": {Namespace: "default", Name: "used", UID: "u1", PV: "pv-big", Phase: PhaseBound}})
}

// A claim that nothing fits is Pending without a lookup error; why is in
// Claims(). A PersistentVolume that appears later is taken at once.
func TestPendingClaimSaysWhy(t *testing.T) {
	inner := newFakeInner()
	inner.pvs = []*v1.PersistentVolume{newPV("pv-a", "1Gi")}
	inner.claims = []*v1.PersistentVolumeClaim{newClaim("data", "5Gi")}
	inner.pods = []*v1.Pod{podUsing("web", "data")}
	h := start(t, inner, statePath(t))
	h.expect("the binder synced", h.synced)
	if c := h.claim("data"); c.Status.Phase != v1.ClaimPending || c.Spec.VolumeName != "" {
		t.Errorf("claim: phase %s, volumeName %q; want Pending", c.Status.Phase, c.Spec.VolumeName)
	}
	cs := h.claimStatus("data")
	if len(cs) != 1 || cs[0].Phase != PhasePending ||
		cs[0].Error != "no PersistentVolume fits claim default/data (1 checked: pv-a: too small (1Gi < 5Gi))" {
		t.Errorf("Claims() for data = %+v", cs)
	}
	h.update(func(f *fakeInner) { f.pvs = append(f.pvs, newPV("pv-b", "5Gi")) }, "bound to the new PV", h.boundTo("data", "pv-b"))
	if cs := h.claimStatus("data"); len(cs) != 1 || cs[0].Error != "" {
		t.Errorf("Claims() for data once bound = %+v; want no error", cs)
	}
	if got := h.logs.FilterMessage("claim not bound").Len(); got != 1 {
		t.Errorf("%d \"claim not bound\" logs, want 1 (the reason did not change)", got)
	}
}

// Nothing is bound while the inner source is not synced: the right
// PersistentVolume may be in a file that has not parsed yet.
func TestNothingBoundWhileUnsynced(t *testing.T) {
	inner := newFakeInner()
	inner.synced = false
	inner.pvs = []*v1.PersistentVolume{newPV("pv-a", "1Gi")}
	inner.claims = []*v1.PersistentVolumeClaim{newClaim("data", "1Gi")}
	inner.pods = []*v1.Pod{podUsing("web", "data")}
	h := start(t, inner, statePath(t))
	h.update(func(f *fakeInner) { f.pods = append(f.pods, podUsing("api", "data")) }, "a pass", func() bool { return true })
	if c := h.claim("data"); c.Status.Phase != v1.ClaimPending || c.Spec.VolumeName != "" {
		t.Errorf("claim while unsynced: phase %s, volumeName %q", c.Status.Phase, c.Spec.VolumeName)
	}
	// It says why, naming the file: in /v1/claims and on the claim's view,
	// where the volumes that use it read it.
	want := "claims are bound once every manifest file has parsed; file x.yaml does not parse"
	if cs := h.claimStatus("data"); len(cs) != 1 || cs[0].Error != want {
		t.Errorf("Claims() while unsynced = %+v; want the reason %q", cs, want)
	}
	if c := h.claim("data"); len(c.Status.Conditions) != 1 || c.Status.Conditions[0].Type != volume.ClaimNotBound || c.Status.Conditions[0].Message != want {
		t.Errorf("claim view conditions %+v; want %s with the reason", c.Status.Conditions, volume.ClaimNotBound)
	}
	if st := h.b.Status(); st.Synced || st.Reason != "file x.yaml does not parse" || st.Name != "manifests" {
		t.Errorf("Status while unsynced = %+v; want the inner source's", st)
	}
	if _, err := h.b.Objects().PersistentVolumeClaim("default", "nope"); !errors.Is(err, volume.ErrNotReady) {
		t.Errorf("a missing claim while unsynced: %v, want not known yet", err)
	}
	if _, err := os.Stat(h.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file written while unsynced: %v", err)
	}
	h.update(func(f *fakeInner) { f.synced = true }, "bound once synced", func() bool {
		return h.synced() && h.boundTo("data", "pv-a")()
	})
	if _, err := h.b.Objects().PersistentVolume("nope"); !errors.Is(err, volume.ErrNotFound) {
		t.Errorf("a missing PersistentVolume once synced: %v, want not found", err)
	}
}

// The binder is not synced until a pass has run after the inner source
// synced, and it passes other lookups and the rest of the source through.
func TestStatusWaitsForAPass(t *testing.T) {
	inner := newFakeInner()
	inner.pods = []*v1.Pod{podUsing("web")}
	inner.node = &v1.Node{}
	b, err := New(Config{Inner: inner, StatePath: statePath(t), NodeName: "node-1", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if st := b.Status(); st.Synced || st.Reason != "claims not bound yet" {
		t.Errorf("Status before a pass = %+v", st)
	}
	if b.Name() != "manifests" || len(b.Pods()) != 1 || b.Node() != inner.node {
		t.Errorf("Name, Pods or Node not passed through")
	}
	if _, err := b.Objects().ConfigMap("default", "cm"); err != nil {
		t.Errorf("ConfigMap: %v", err)
	}
	if _, err := b.Objects().Secret("default", "s"); !errors.Is(err, volume.ErrNotFound) {
		t.Errorf("Secret: %v", err)
	}
}

// A Bound claim that leaves the source is Released: its PersistentVolume
// is retained for it, and it gets that PV back when it returns, even if a
// smaller PV fits by then.
func TestReleaseAndBindAgain(t *testing.T) {
	inner := newFakeInner()
	inner.pvs = []*v1.PersistentVolume{newPV("pv-a", "5Gi")}
	inner.claims = []*v1.PersistentVolumeClaim{newClaim("data", "1Gi", claimUID("u1"))}
	inner.pods = []*v1.Pod{podUsing("web", "data")}
	h := start(t, inner, statePath(t))
	h.expect("bound", h.boundTo("data", "pv-a"))

	claims := inner.PersistentVolumeClaims()
	h.update(func(f *fakeInner) { f.claims, f.pods = nil, nil }, "released", func() bool {
		return slices.Equal(h.claimStatus("data"), []ClaimStatus{{Namespace: "default", Name: "data", UID: "u1", Phase: PhaseReleased, PV: "pv-a", ReclaimPolicy: "Retain"}})
	})
	pv := h.pv("pv-a")
	if pv.Status.Phase != v1.VolumeReleased || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Name != "data" || pv.Spec.ClaimRef.UID != "u1" {
		t.Errorf("pv-a once released: phase %s, claimRef %+v; want Released, still naming default/data (u1)", pv.Status.Phase, pv.Spec.ClaimRef)
	}
	recs, err := newStore(h.path).load()
	if r := recs["pv-a"]; err != nil || len(recs) != 1 || r.Phase != PhaseReleased || r.claim() != (claimKey{"default", "data", "u1"}) || r.ReleasedAt.IsZero() {
		t.Errorf("state file: %v, %v; want pv-a Released by default/data (u1), with its time", recs, err)
	}

	h.update(func(f *fakeInner) {
		f.pvs = append(f.pvs, newPV("pv-0", "1Gi"))
		f.claims = claims
	}, "bound again", h.boundTo("data", "pv-a"))
	if h.pv("pv-a").Status.Phase != v1.VolumeBound {
		t.Errorf("pv-a once bound again: %s", h.pv("pv-a").Status.Phase)
	}
	if h.logs.FilterMessage("claim released").Len() != 1 ||
		h.logs.FilterMessage("claim bound again to the PersistentVolume it released").Len() != 1 {
		t.Errorf("release and rebinding not logged: %v", h.logs.All())
	}
}

// A claim with the name of a released one but another UID is a new claim:
// it never gets the Released PersistentVolume.
func TestNewClaimNeverGetsAReleasedPV(t *testing.T) {
	inner := newFakeInner()
	inner.pvs = []*v1.PersistentVolume{newPV("pv-a", "1Gi")}
	inner.claims = []*v1.PersistentVolumeClaim{newClaim("data", "1Gi", claimUID("u1"))}
	inner.pods = []*v1.Pod{podUsing("web", "data")}
	h := start(t, inner, statePath(t))
	h.expect("bound", h.boundTo("data", "pv-a"))

	h.update(func(f *fakeInner) { f.claims = []*v1.PersistentVolumeClaim{newClaim("data", "1Gi", claimUID("u2"))} },
		"the old claim released", func() bool { cs := h.claimStatus("data"); return len(cs) == 2 && cs[1].Phase == PhaseReleased })
	want := []ClaimStatus{
		{Namespace: "default", Name: "data", Phase: PhasePending,
			Error: "no PersistentVolume fits claim default/data (1 checked: pv-a: released by default/data and retained for it)"},
		{Namespace: "default", Name: "data", UID: "u1", Phase: PhaseReleased, PV: "pv-a", ReclaimPolicy: "Retain"},
	}
	if got := h.claimStatus("data"); !slices.Equal(got, want) {
		t.Errorf("Claims() = %+v, want %+v", got, want)
	}
	h.update(func(f *fakeInner) { f.pvs = append(f.pvs, newPV("pv-b", "1Gi")) }, "the new claim bound", h.boundTo("data", "pv-b"))
	if ref := h.pv("pv-a").Spec.ClaimRef; ref == nil || ref.UID != "u1" || h.pv("pv-a").Status.Phase != v1.VolumeReleased {
		t.Errorf("pv-a: claimRef %+v; want still Released for u1", ref)
	}
}

// A Bound claim whose PersistentVolume is gone is Lost and keeps its
// record, even when another PV fits; it is Bound again when the PV is
// back. A Released record whose PV is gone is dropped.
func TestLostClaimKeepsItsBinding(t *testing.T) {
	inner := newFakeInner()
	inner.pvs = []*v1.PersistentVolume{newPV("pv-a", "1Gi")}
	inner.claims = []*v1.PersistentVolumeClaim{newClaim("data", "1Gi")}
	inner.pods = []*v1.Pod{podUsing("web", "data")}
	h := start(t, inner, statePath(t))
	h.expect("bound", h.boundTo("data", "pv-a"))
	pvA := inner.PersistentVolumes()[0]

	h.update(func(f *fakeInner) { f.pvs = []*v1.PersistentVolume{newPV("pv-b", "1Gi")} }, "lost", func() bool {
		return h.claim("data").Status.Phase == v1.ClaimLost
	})
	if c := h.claim("data"); c.Spec.VolumeName != "pv-a" {
		t.Errorf("lost claim's volumeName %q, want pv-a", c.Spec.VolumeName)
	}
	if cs := h.claimStatus("data"); len(cs) != 1 || cs[0].Phase != PhaseLost || cs[0].PV != "pv-a" || !strings.Contains(cs[0].Error, "no longer exists") {
		t.Errorf("Claims() = %+v", cs)
	}
	if h.pv("pv-b").Status.Phase != v1.VolumeAvailable {
		t.Errorf("pv-b was given to the lost claim")
	}
	if _, err := h.b.Objects().PersistentVolume("pv-a"); !errors.Is(err, volume.ErrNotFound) {
		t.Errorf("lookup of the gone PV: %v", err)
	}
	assertRecords(t, h.path, records{"pv-a": {Namespace: "default", Name: "data", PV: "pv-a", Phase: PhaseBound}})
	if lost := h.logs.FilterMessage("claim lost: its PersistentVolume is gone").All(); len(lost) != 1 || lost[0].Level != zapcore.WarnLevel {
		t.Errorf("Lost logged %v, want once at warn level", lost)
	}

	h.update(func(f *fakeInner) { f.pvs = append(f.pvs, pvA) }, "bound again", func() bool {
		return h.claim("data").Status.Phase == v1.ClaimBound
	})
	h.update(func(f *fakeInner) { f.claims, f.pods = nil, nil }, "released", func() bool {
		return h.pv("pv-a").Status.Phase == v1.VolumeReleased
	})
	h.update(func(f *fakeInner) { f.pvs = f.pvs[:1] }, "dropped", func() bool { return len(h.b.Claims()) == 0 })
	assertRecords(t, h.path, records{})
}

// A binder started on an existing state file exposes the same bindings,
// before the inner source syncs and after, even when a smaller PV that
// fits appeared meanwhile.
func TestBindingsSurviveRestart(t *testing.T) {
	path := statePath(t)
	inner := newFakeInner()
	inner.pvs = []*v1.PersistentVolume{newPV("pv-b", "5Gi")}
	inner.claims = []*v1.PersistentVolumeClaim{newClaim("data", "1Gi")}
	inner.pods = []*v1.Pod{podUsing("web", "data")}
	h := start(t, inner, path)
	h.expect("bound", h.boundTo("data", "pv-b"))
	h.stop()
	before, _ := os.ReadFile(path)

	inner = newFakeInner()
	inner.synced = false
	inner.pvs = []*v1.PersistentVolume{newPV("pv-a", "1Gi"), newPV("pv-b", "5Gi")}
	inner.claims = []*v1.PersistentVolumeClaim{newClaim("data", "1Gi")}
	inner.pods = []*v1.Pod{podUsing("web", "data")}
	h = start(t, inner, path)
	if !h.boundTo("data", "pv-b")() {
		t.Errorf("after a restart, before sync: claim %+v; want Bound to pv-b from the state file", h.claim("data"))
	}
	h.update(func(f *fakeInner) { f.synced = true }, "synced", h.synced)
	if !h.boundTo("data", "pv-b")() || h.pv("pv-a").Status.Phase != v1.VolumeAvailable {
		t.Errorf("after a restart, once synced: claim %+v; want still Bound to pv-b", h.claim("data"))
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Errorf("state file rewritten:\n%s\nwas:\n%s", after, before)
	}
}

// A binding is never silently moved: an edit of the claim that another PV
// would fit better keeps it, and Claims() says why.
func TestBindingIsNeverMoved(t *testing.T) {
	inner := newFakeInner()
	inner.pvs = []*v1.PersistentVolume{newPV("pv-a", "1Gi"), newPV("pv-b", "5Gi")}
	inner.claims = []*v1.PersistentVolumeClaim{newClaim("data", "1Gi")}
	inner.pods = []*v1.Pod{podUsing("web", "data")}
	h := start(t, inner, statePath(t))
	h.expect("bound", h.boundTo("data", "pv-a"))

	h.update(func(f *fakeInner) {
		f.claims = []*v1.PersistentVolumeClaim{newClaim("data", "5Gi", claimVolumeName("pv-b"), claimClass(""))}
	}, "a pass", func() bool { return h.claimStatus("data")[0].Error != "" })
	if !h.boundTo("data", "pv-a")() || h.pv("pv-b").Status.Phase != v1.VolumeAvailable {
		t.Errorf("claim %+v moved", h.claim("data"))
	}
	if cs := h.claimStatus("data"); !strings.Contains(cs[0].Error, "a binding is never moved") {
		t.Errorf("Claims() = %+v", cs)
	}
	if c := h.claim("data"); c.Annotations["pv.kubernetes.io/bound-by-controller"] != "yes" {
		t.Errorf("annotations %v", c.Annotations)
	}
}

// A claim whose spec.volumeName names a PV is bound without
// bound-by-controller, and the PV is left to it when others bind first.
func TestVolumeNameIsNotBoundByController(t *testing.T) {
	inner := newFakeInner()
	inner.pvs = []*v1.PersistentVolume{newPV("pv-a", "1Gi"), newPV("pv-b", "5Gi", pvClaimRef("default", "b", ""))}
	inner.claims = []*v1.PersistentVolumeClaim{newClaim("a", "1Gi"), newClaim("b", "1Gi"), newClaim("c", "1Gi", claimVolumeName("pv-a"))}
	inner.pods = []*v1.Pod{podUsing("web", "a", "b")}
	h := start(t, inner, statePath(t))
	h.expect("b bound", h.boundTo("b", "pv-b"))
	if c := h.claim("a"); c.Status.Phase != v1.ClaimPending {
		t.Errorf("claim a took %q, which claim c names", c.Spec.VolumeName)
	}
	h.update(func(f *fakeInner) { f.pods = append(f.pods, podUsing("api", "c")) }, "c bound", h.boundTo("c", "pv-a"))
	c := h.claim("c")
	if _, ok := c.Annotations["pv.kubernetes.io/bound-by-controller"]; ok || c.Annotations["pv.kubernetes.io/bind-completed"] != "yes" {
		t.Errorf("claim c annotations %v; want bind-completed only", c.Annotations)
	}
	if _, ok := h.pv("pv-b").Annotations["pv.kubernetes.io/bound-by-controller"]; ok {
		t.Errorf("pre-bound pv-b is marked bound by the controller")
	}
	if h.pv("pv-a").Annotations["pv.kubernetes.io/bound-by-controller"] != "yes" {
		t.Errorf("pv-a, whose claimRef the binder set, is not marked bound by the controller")
	}
}

// A binding whose write fails (a full disk) is not exposed: the claim stays
// Pending with the error, and the write is tried again after a backoff.
func TestUnrecordedBindingIsNotExposed(t *testing.T) {
	var full atomic.Bool
	full.Store(true)
	inner := newFakeInner()
	inner.pvs = []*v1.PersistentVolume{newPV("pv-a", "1Gi")}
	inner.claims = []*v1.PersistentVolumeClaim{newClaim("data", "1Gi")}
	inner.pods = []*v1.Pod{podUsing("web", "data")}
	h := start(t, inner, statePath(t), func(b *Source) {
		b.retryMin = 50 * time.Millisecond
		b.store.write = func(path string, data []byte) error {
			if full.Load() {
				return &os.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
			}
			return writeFileAtomic(path, data)
		}
	})
	h.expect("the binder synced", h.synced)
	if c := h.claim("data"); c.Status.Phase != v1.ClaimPending || h.pv("pv-a").Status.Phase != v1.VolumeAvailable {
		t.Errorf("a binding that is not on disk is exposed: claim %s, PV %s", c.Status.Phase, h.pv("pv-a").Status.Phase)
	}
	if cs := h.claimStatus("data"); !strings.Contains(cs[0].Error, `binding to PersistentVolume "pv-a" not recorded`) ||
		!strings.Contains(cs[0].Error, "no space left on device") {
		t.Errorf("Claims() = %+v", cs)
	}
	if st := h.b.Status(); len(st.Errors) != 1 || !strings.Contains(st.Errors[0], "no space left on device") {
		t.Errorf("Status().Errors = %q", st.Errors)
	}
	if _, err := os.Stat(h.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file: %v", err)
	}
	full.Store(false)
	h.expect("bound once there is room", h.boundTo("data", "pv-a"))
	if st := h.b.Status(); len(st.Errors) != 0 {
		t.Errorf("Status().Errors once written = %q", st.Errors)
	}
	assertRecords(t, h.path, records{"pv-a": {Namespace: "default", Name: "data", PV: "pv-a", Phase: PhaseBound}})
}

func TestRunReturnsTheInnerError(t *testing.T) {
	inner := newFakeInner()
	inner.runErr = errors.New("cannot watch")
	b, err := New(Config{Inner: inner, StatePath: statePath(t), NodeName: "node-1", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Run(t.Context()); err == nil || err.Error() != "cannot watch" {
		t.Errorf("Run = %v, want the inner source's error", err)
	}
}

// assertRecords checks the state file's bindings.
func assertRecords(t *testing.T, path string, want records) {
	t.Helper()
	got, err := newStore(path).load()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("state file has %v, want %v", got, want)
	}
	for pv, r := range want {
		if got[pv] != r {
			t.Errorf("state file has %+v for %s, want %+v", got[pv], pv, r)
		}
	}
}
