package binder

import (
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/reclaim"
)

// podWithEphemeral is pod "web" (uid-web) with the ephemeral volume
// "scratch" of class "fast", its template changed by opts.
func podWithEphemeral(opts ...func(*v1.PersistentVolumeClaimTemplate)) *v1.Pod {
	class := "fast"
	tmpl := &v1.PersistentVolumeClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"note": "scratch"}},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			StorageClassName: &class,
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	for _, o := range opts {
		o(tmpl)
	}
	pod := podUsing("web")
	pod.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{VolumeClaimTemplate: tmpl}}}}
	return pod
}

// madeForWeb returns podWithEphemeral() and the claim made for it.
func madeForWeb(t *testing.T) (*v1.Pod, madeClaims) {
	t.Helper()
	pod := podWithEphemeral()
	c, err := claimFromTemplate(pod, &pod.Spec.Volumes[0], "n1")
	if err != nil {
		t.Fatal(err)
	}
	return pod, madeClaims{"default/web-scratch": {PodUID: pod.UID, Volume: "scratch", Nonce: "n1", Claim: c}}
}

func ephemeralInner(pod *v1.Pod) *fakeInner {
	inner := newFakeInner()
	inner.scs = []*storagev1.StorageClass{newClass("fast")}
	inner.pods = []*v1.Pod{pod}
	return inner
}

// The claim of an ephemeral volume is made from its template, owned by the
// pod, recorded before it is shown, and provisioned; a restart finds it and
// makes neither a second claim nor a second volume; the pod's removal
// releases it and deletes its storage (reclaim policy Delete), and the
// made claim is forgotten.
func TestEphemeralClaimLifecycle(t *testing.T) {
	prov := &fakeProvisioner{}
	path := statePath(t)
	uid := madeUID("uid-web", "scratch", "n1")
	pvName := "pvc-" + string(uid)
	h := startWith(t, ephemeralInner(podWithEphemeral()), path, []provisioner.Provisioner{prov})
	h.expect("made and bound", func() bool {
		if !h.boundTo("web-scratch", pvName)() {
			return false
		}
		recs, made, err := newStore(path).loadState()
		if err != nil || made["default/web-scratch"].Claim == nil || recs[pvName].UID != uid {
			t.Fatalf("shown but the state file has %v, %v, %v", recs, made, err)
		}
		return true
	})
	c := h.claim("web-scratch")
	if c.UID != uid || !metav1.IsControlledBy(c, podWithEphemeral()) || c.Labels["app"] != "web" || c.Annotations["note"] != "scratch" ||
		c.Spec.Resources.Requests.Storage().String() != "1Gi" {
		t.Errorf("made claim %+v", c)
	}
	if cs := h.claimStatus("web-scratch"); len(cs) != 1 || cs[0].Phase != PhaseBound {
		t.Errorf("Claims() = %+v", cs)
	}
	h.stop()

	h = startWith(t, ephemeralInner(podWithEphemeral()), path, []provisioner.Provisioner{prov})
	h.expect("the same claim after a restart", h.boundTo("web-scratch", pvName))
	if made, _ := prov.calls(); len(made) != 1 {
		t.Errorf("Provision called for %v; want once, whatever restarts", made)
	}

	h.update(func(f *fakeInner) { f.pods = nil; f.claims = []*v1.PersistentVolumeClaim{newClaim("keep", "1Gi")} },
		"released, deleted and forgotten", func() bool {
			_, deleted := prov.calls()
			_, made, _ := newStore(path).loadState()
			return len(deleted) == 1 && len(made) == 0 && len(h.claimStatus("web-scratch")) == 0
		})
	if h.logs.FilterMessage("ephemeral volume claim deleted").Len() != 1 {
		t.Errorf("the claim's deletion is not logged")
	}
}

// A template with a field the agent does not support is not made into a
// claim; the lookup of the claim says why, naming pod, volume and field.
func TestEphemeralTemplateRefused(t *testing.T) {
	tests := []struct {
		name string
		opt  func(*v1.PersistentVolumeClaimTemplate)
		want string
	}{
		{"metadata.name", func(t *v1.PersistentVolumeClaimTemplate) { t.Name = "mine" },
			`ephemeral volume "scratch" of pod default/web: volumeClaimTemplate.metadata.name is not supported: only labels and annotations are (the claim is named web-scratch and owned by the pod)`},
		{"metadata.finalizers", func(t *v1.PersistentVolumeClaimTemplate) { t.Finalizers = []string{"x"} },
			`volumeClaimTemplate.metadata.finalizers is not supported`},
		{"spec.dataSource", func(t *v1.PersistentVolumeClaimTemplate) {
			t.Spec.DataSource = &v1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "src"}
		}, `ephemeral volume "scratch" of pod default/web: volumeClaimTemplate.spec.dataSource is not supported: the agent makes only empty volumes`},
		{"spec.dataSourceRef", func(t *v1.PersistentVolumeClaimTemplate) {
			t.Spec.DataSourceRef = &v1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "src"}
		}, `volumeClaimTemplate.spec.dataSourceRef is not supported`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prov := &fakeProvisioner{}
			h := startWith(t, ephemeralInner(podWithEphemeral(tt.opt)), statePath(t), []provisioner.Provisioner{prov})
			h.eventually("refused", func() bool {
				_, err := h.b.Objects().PersistentVolumeClaim("default", "web-scratch")
				return err != nil && strings.Contains(err.Error(), tt.want)
			})
			if made, _ := prov.calls(); len(made) != 0 || len(h.b.current().made) != 0 {
				t.Errorf("made %v, provisioned %v; want nothing", h.b.current().made, made)
			}
		})
	}
}

// A claim of the source named like the ephemeral volume's claim is never
// replaced, and, not owned by the pod, never bound or provisioned for it.
func TestEphemeralNameTakenBySourceClaim(t *testing.T) {
	prov := &fakeProvisioner{}
	inner := ephemeralInner(podWithEphemeral())
	inner.claims = []*v1.PersistentVolumeClaim{newClaim("web-scratch", "1Gi", claimClass("fast"))}
	h := startWith(t, inner, statePath(t), []provisioner.Provisioner{prov})
	h.expect("synced", h.synced)
	c := h.claim("web-scratch")
	if len(c.OwnerReferences) != 0 || c.Status.Phase != v1.ClaimPending || len(h.b.current().made) != 0 {
		t.Errorf("claim %+v, made %v; want the source's claim, Pending, and nothing made", c, h.b.current().made)
	}
	if made, _ := prov.calls(); len(made) != 0 {
		t.Errorf("provisioned %v for a claim the pod does not own", made)
	}
}

// makeClaims makes a claim per ephemeral volume of a running pod, once,
// and forgets it only once its pod is gone and it holds no Bound record.
func TestMakeClaims(t *testing.T) {
	pod, have := madeForWeb(t)
	made := have["default/web-scratch"].Claim
	bound := records{"pv-1": {Namespace: "default", Name: "web-scratch", UID: made.UID, PV: "pv-1", Phase: PhaseBound}}
	released := records{"pv-1": {Namespace: "default", Name: "web-scratch", UID: made.UID, PV: "pv-1", Phase: PhaseReleased}}
	provisioning := records{"pv-1": {Namespace: "default", Name: "web-scratch", UID: made.UID, PV: "pv-1", Phase: phaseProvisioning}}
	terminated := podWithEphemeral()
	terminated.Status.Phase = v1.PodSucceeded
	edited := podWithEphemeral(func(t *v1.PersistentVolumeClaimTemplate) { t.Labels = map[string]string{"app": "edited"} })
	tests := []struct {
		name   string
		pods   []*v1.Pod
		claims []*v1.PersistentVolumeClaim
		prev   madeClaims
		recs   records
		want   []string // the made claims' names
		newUID bool     // web-scratch is made anew, with another nonce
	}{
		{name: "a running pod's volume", pods: []*v1.Pod{pod}, want: []string{"web-scratch"}, newUID: true},
		{name: "a terminated pod gets none", pods: []*v1.Pod{terminated}},
		{name: "a terminated pod keeps its claim", pods: []*v1.Pod{terminated}, prev: have, want: []string{"web-scratch"}},
		{name: "a claim of the source of that name", pods: []*v1.Pod{pod}, claims: []*v1.PersistentVolumeClaim{newClaim("web-scratch", "1Gi")}},
		{name: "an edited template changes nothing", pods: []*v1.Pod{edited}, prev: have, want: []string{"web-scratch"}},
		{name: "pod gone, claim bound: kept", prev: have, recs: bound, want: []string{"web-scratch"}},
		{name: "pod gone, claim being provisioned: kept", prev: have, recs: provisioning, want: []string{"web-scratch"}},
		{name: "pod gone, claim released: forgotten", prev: have, recs: released},
		{name: "a pod of the same UID back once the claim was released: a new claim", pods: []*v1.Pod{pod}, prev: have, recs: released,
			want: []string{"web-scratch"}, newUID: true},
		{name: "pod gone, claim never bound: forgotten", prev: have},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, refused := makeClaims(world{pods: tt.pods, claims: tt.claims, newNonce: func() string { return "n2" }}, tt.prev, tt.recs)
			var got []string
			for _, m := range next.sorted() {
				got = append(got, m.Claim.Name)
			}
			if !slices.Equal(got, tt.want) || len(refused) != 0 {
				t.Fatalf("made %v, refused %v; want %v", got, refused, tt.want)
			}
			m, ok := next["default/web-scratch"]
			switch {
			case ok && tt.newUID && (m.Nonce != "n2" || m.Claim.UID != madeUID(pod.UID, "scratch", "n2")):
				t.Errorf("made claim %+v (nonce %q); want a new one, of nonce n2", m.Claim, m.Nonce)
			case ok && !tt.newUID && (m.Claim.Labels["app"] != "web" || m.Claim.UID != made.UID):
				t.Errorf("made claim %+v; want the first one, unchanged", m.Claim)
			}
		})
	}
}

// A pod that reuses the name (and, from manifests, the UID) of a pod whose
// removal counted gets a claim of its own, with a new nonce and so a new
// UID and volume; the old claim's storage, aside, is never given to it.
func TestEphemeralClaimIsNeverHandedToAPodReusingItsName(t *testing.T) {
	prov := &fakeProvisioner{}
	path := statePath(t)
	first, second := madeUID("uid-web", "scratch", "n1"), madeUID("uid-web", "scratch", "n2")
	h := startWith(t, ephemeralInner(podWithEphemeral()), path, []provisioner.Provisioner{prov}, func(b *Source) { b.delay = time.Hour })
	h.expect("made and bound", h.boundTo("web-scratch", "pvc-"+string(first)))
	h.update(func(f *fakeInner) { f.pods = nil }, "released and aside", func() bool {
		recs, made, _ := newStore(path).loadState()
		r := recs["pvc-"+string(first)]
		return r.Phase == PhaseReleased && r.Reclaim.Step == reclaim.Aside && len(made) == 0
	})
	h.update(func(f *fakeInner) { f.pods = []*v1.Pod{podWithEphemeral()} }, "a new claim bound to a new volume",
		h.boundTo("web-scratch", "pvc-"+string(second)))
	recs, _, err := newStore(path).loadState()
	if r := recs["pvc-"+string(first)]; err != nil || r.Phase != PhaseReleased || r.UID != first || r.Reclaim.Step != reclaim.Aside {
		t.Fatalf("the first claim's record = %+v (%v); want it Released, aside, for the first claim alone", r, err)
	}
	if made, _ := prov.calls(); len(made) != 2 {
		t.Errorf("provisioned %v; want a volume per claim", made)
	}
}

// The claim made for a pod removed while the agent was stopped is
// released once the manifests have listed objects for the settle time,
// never while they list nothing, and its storage is reclaimed.
func TestEphemeralClaimOfAPodGoneWhileStopped(t *testing.T) {
	prov := &fakeProvisioner{}
	path := statePath(t)
	pvName := "pvc-" + string(madeUID("uid-web", "scratch", "n1"))
	h := startWith(t, ephemeralInner(podWithEphemeral()), path, []provisioner.Provisioner{prov})
	h.expect("made and bound", h.boundTo("web-scratch", pvName))
	h.stop()

	empty := newFakeInner()
	h = startWith(t, empty, path, []provisioner.Provisioner{prov})
	h.expect("synced", h.synced)
	time.Sleep(5 * testSettle)
	if recs, made, _ := newStore(path).loadState(); recs[pvName].Phase != PhaseBound || len(made) != 1 {
		t.Fatalf("with an empty source: records %+v, made %v; want the claim kept Bound", recs, made)
	}
	h.stop()

	listing := newFakeInner()
	listing.scs = []*storagev1.StorageClass{newClass("fast")}
	h = startWith(t, listing, path, []provisioner.Provisioner{prov})
	h.expect("released, deleted and forgotten", func() bool {
		recs, made, _ := newStore(path).loadState()
		_, deleted := prov.calls()
		return len(recs) == 0 && len(made) == 0 && len(deleted) == 1
	})
}
