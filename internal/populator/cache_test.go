package populator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins"
	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// specs returns the Spec of every desired volume, by pod and volume: a
// volume computed again gets a new Spec.
func specs(w *dsw.World) map[string]*volume.Spec {
	out := map[string]*volume.Spec{}
	for _, p := range w.Pods() {
		for _, v := range p.Volumes {
			out[string(p.UID)+"/"+v.Name] = v.Spec
		}
	}
	return out
}

// recomputed returns the volumes whose Spec changed between two specs.
func recomputed(before, after map[string]*volume.Spec) []string {
	out := []string{}
	for k, s := range after {
		if before[k] != s {
			out = append(out, k)
		}
	}
	return out
}

// TestAnEventComputesOnlyWhatItTouches: a pass after a change to one pod,
// or to one object, computes that pod's volumes, or the volumes that read
// the object, and nothing else; the level-triggered pass computes all.
func TestAnEventComputesOnlyWhatItTouches(t *testing.T) {
	src := benchNode(5)
	h := newHarness(t, src)
	h.p.Populate()
	steps := []struct {
		name   string
		change func()
		want   []string
		// changed: the desired state shows a difference
		changed bool
	}{
		{"nothing", func() {}, []string{}, false},
		{"pod 1 relabelled", func() { benchEvent(src, "pod", 1, 0) }, []string{"uid-pod-1/all", "uid-pod-1/config", "uid-pod-1/creds", "uid-pod-1/scratch"}, false},
		{"configMap of pod 2", func() { benchEvent(src, "configMap", 2, 1) }, []string{"uid-pod-2/all", "uid-pod-2/config"}, true},
		{"secret of pod 3 deleted", func() {
			src.mu.Lock()
			delete(src.secrets, "ns/pod-3")
			src.mu.Unlock()
		}, []string{"uid-pod-3/creds"}, true},
	}
	for _, step := range steps {
		before, changes := specs(h.desired), h.changes.Load()
		step.change()
		h.p.Populate()
		if got := recomputed(before, specs(h.desired)); !sameSet(got, step.want) {
			t.Errorf("%s: computed again %v, want %v", step.name, got, step.want)
		}
		if changed := h.changes.Load() != changes; changed != step.changed {
			t.Errorf("%s: desired state signalled a change: %v, want %v", step.name, changed, step.changed)
		}
	}
	if v := h.volume(t, "uid-pod-3", "creds"); !strings.HasSuffix(v.Version, "/absent") {
		t.Errorf("version of the volume of a deleted secret = %q, want .../absent", v.Version)
	}
	before := specs(h.desired)
	h.p.PopulateAll()
	if got := recomputed(before, specs(h.desired)); len(got) != len(before) {
		t.Errorf("a full pass computed again %d of %d volumes", len(got), len(before))
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]bool{}
	for _, x := range a {
		seen[x] = true
	}
	for _, x := range b {
		if !seen[x] {
			return false
		}
	}
	return true
}

// TestVolumeFoundOnDiskAfterThePassIsKept: the actual state changes after
// the pod was computed (reconstruction runs beside the first pass); the
// next pass keeps the found volume, though the pod itself did not change.
func TestVolumeFoundOnDiskAfterThePassIsKept(t *testing.T) {
	src := newSource("manifests", true, testPod("u1", "web", emptyDirVolume("other")))
	h, actual := withActual(t, src)
	h.p.Populate()
	actual.Set(asw.Volume{PodUID: "u1", Name: "data", Plugin: "kubernetes.io/empty-dir", State: asw.Uncertain, Reconstructed: true})
	h.p.Populate()
	if v := h.volume(t, "u1", "data"); !v.Kept {
		t.Fatalf("volume found on disk = %+v, want it kept", v)
	}
	// A volume set up, and its version written, leave the volumes as
	// they were computed.
	before := specs(h.desired)
	actual.Set(asw.Volume{PodUID: "u1", Name: "other", Plugin: "kubernetes.io/empty-dir", State: asw.Mounted, Version: "x"})
	h.p.Populate()
	actual.Set(asw.Volume{PodUID: "u1", Name: "other", Plugin: "kubernetes.io/empty-dir", State: asw.Mounted, Version: "y"})
	h.p.Populate()
	if got := recomputed(before, specs(h.desired)); len(got) != 0 {
		t.Fatalf("computed again %v", got)
	}
	if v := h.volume(t, "u1", "data"); !v.Kept {
		t.Fatalf("volume found on disk = %+v, want it still kept", v)
	}
}

// TestPodGoneWhileItsSourceWasUnsyncedIsRemovedOnceItSyncs: a full pass
// while the source cannot be trusted keeps its pod; the first pass after
// the source synced removes it, without waiting for the next full pass.
func TestPodGoneWhileItsSourceWasUnsyncedIsRemovedOnceItSyncs(t *testing.T) {
	src := newSource("api", true, testPod("u1", "web", emptyDirVolume("data")))
	h := newHarness(t, src)
	h.p.Populate()
	src.setPods()
	src.setSynced(false)
	h.p.PopulateAll()
	if _, ok := h.desired.Pod("u1"); !ok {
		t.Fatal("the pod of an unsynced source was removed")
	}
	src.setSynced(true)
	h.p.Populate()
	if _, ok := h.desired.Pod("u1"); ok {
		t.Fatal("the pod is still desired after its source synced without it")
	}
}

// copyingObjects hands out a new copy of a claim at every lookup, as the
// binder's views do.
type copyingObjects struct {
	mu    sync.Mutex
	claim *v1.PersistentVolumeClaim // guarded by mu
	reads int                       // guarded by mu
}

func (o *copyingObjects) ConfigMap(ns, name string) (*v1.ConfigMap, error) {
	return nil, volume.ErrNotFound
}

func (o *copyingObjects) Secret(ns, name string) (*v1.Secret, error) { return nil, volume.ErrNotFound }

func (o *copyingObjects) PersistentVolumeClaim(ns, name string) (*v1.PersistentVolumeClaim, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reads++
	return o.claim.DeepCopy(), nil
}

func (o *copyingObjects) PersistentVolume(name string) (*v1.PersistentVolume, error) {
	return nil, volume.ErrNotFound
}

func (o *copyingObjects) set(c *v1.PersistentVolumeClaim) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.claim = c
}

// TestObjectsCopiedAtEveryLookupAreComparedByContent: a claim handed out
// as a new copy each time is the same claim while its content is; a
// bound claim is a change.
func TestObjectsCopiedAtEveryLookupAreComparedByContent(t *testing.T) {
	claimVol := v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}
	src := newSource("manifests", true, testPod("u1", "web", claimVol))
	objs := &copyingObjects{claim: &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}, Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimPending}}}
	src.objects = objs
	h := newHarness(t, src)
	h.p.Populate()
	if v := h.volume(t, "u1", "data"); !strings.Contains(v.Waiting, "is not bound yet") {
		t.Fatalf("volume of an unbound claim = %+v, want it waiting", v)
	}
	before := specs(h.desired)
	h.p.Populate()
	if got := recomputed(before, specs(h.desired)); len(got) != 0 {
		t.Fatalf("an equal copy of the claim computed %v again", got)
	}
	bound := objs.claim.DeepCopy()
	bound.Spec.VolumeName, bound.Status.Phase = "pv-1", v1.ClaimBound
	objs.set(bound)
	h.p.Populate()
	if v := h.volume(t, "u1", "pv-1"); !strings.Contains(v.Waiting, "PersistentVolume pv-1 not found yet") {
		t.Fatalf("volume of the bound claim = %+v, want it named after its PV and waiting for it", v)
	}
}

// fakeTokens is a token source whose version the test moves on.
type fakeTokens struct{ version atomic.Pointer[string] }

func (f *fakeTokens) Token(context.Context, *v1.Pod, *v1.ServiceAccountTokenProjection, []byte) ([]byte, error) {
	return []byte("token"), nil
}

func (f *fakeTokens) Version(*v1.Pod, *v1.ServiceAccountTokenProjection) string {
	return *f.version.Load()
}

func (f *fakeTokens) set(v string) { f.version.Store(&v) }

// TestTokenVolumesFollowTheirTokens: a token is no source's object: its
// volume is computed at every pass, and its new version is seen though
// nothing in the sources changed.
func TestTokenVolumesFollowTheirTokens(t *testing.T) {
	tokens := &fakeTokens{}
	tokens.set("token:1")
	tokenVol := v1.Volume{Name: "api", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}},
	}}}}
	src := newSource("api", true, testPod("u1", "web", tokenVol, emptyDirVolume("data")))
	desired := dsw.New(nil)
	p := New(Config{Sources: []source.Source{src}, Desired: desired, Logger: zaptest.NewLogger(t), Resync: time.Hour,
		Plugins: plugins.Default(plugins.Config{Mounter: &mount.Fake{}, NodeName: "node-1", Tokens: tokens})})
	h := &harness{p: p, desired: desired}
	p.Populate()
	before := specs(desired)
	p.Populate()
	if got := recomputed(before, specs(desired)); len(got) != 0 {
		t.Fatalf("an unchanged token volume was stored again: %v", got)
	}
	tokens.set("token:2")
	p.Populate()
	if v := h.volume(t, "u1", "api"); !strings.HasSuffix(v.Version, "/token:2") {
		t.Fatalf("version = %q, want the new token's", v.Version)
	}
	if got := recomputed(before, specs(desired)); !sameSet(got, []string{"u1/api"}) {
		t.Fatalf("computed again %v, want u1/api", got)
	}
}

// TestIncrementalPassesMatchAFullPass changes pods and objects at random
// and checks that the desired state after each pass is what a populator
// without a cache computes from the same sources.
func TestIncrementalPassesMatchAFullPass(t *testing.T) {
	src := benchNode(6)
	h := newHarness(t, src)
	fresh := func() []dsw.Pod {
		w := dsw.New(nil)
		New(Config{Sources: []source.Source{src}, Desired: w, Logger: zaptest.NewLogger(t),
			Plugins: plugins.Default(plugins.Config{Mounter: &mount.Fake{}, NodeName: "node-1"})}).Populate()
		return w.Pods()
	}
	for round := range 200 {
		i := round * 7 % 6
		switch round % 4 {
		case 0:
			benchEvent(src, "pod", i, round)
		case 1:
			benchEvent(src, "configMap", i, round)
		case 2:
			src.mu.Lock()
			delete(src.configMaps, fmt.Sprintf("ns/pod-%d", i))
			src.mu.Unlock()
		case 3:
			src.mu.Lock()
			src.pods[i] = benchPod(fmt.Sprintf("pod-%d", i), fmt.Sprint(round))
			src.pods[i].Spec.Volumes = src.pods[i].Spec.Volumes[round%3:]
			src.mu.Unlock()
		}
		h.p.Populate()
		if got, want := versions(h.desired.Pods()), versions(fresh()); got != want {
			t.Fatalf("round %d: desired state\n%s\nwant\n%s", round, got, want)
		}
	}
}

// versions renders what the desired state shows of pods, Specs aside.
func versions(pods []dsw.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		for _, v := range p.Volumes {
			spec := v.Spec
			v.Spec = nil
			fmt.Fprintf(&b, "%s %+v pod=%v\n", p.UID, v, spec != nil && spec.Pod.UID == types.UID(p.UID))
		}
	}
	return b.String()
}

// podTokens is a token source whose versions are per pod, counting the
// Version calls of each.
type podTokens struct {
	mu       sync.Mutex
	versions map[types.UID]string // guarded by mu
	calls    map[types.UID]int    // guarded by mu
}

func (f *podTokens) Token(context.Context, *v1.Pod, *v1.ServiceAccountTokenProjection, []byte) ([]byte, error) {
	return []byte("token"), nil
}

func (f *podTokens) Version(pod *v1.Pod, _ *v1.ServiceAccountTokenProjection) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[pod.UID]++
	return f.versions[pod.UID]
}

func (f *podTokens) set(uid types.UID, v string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.versions[uid] = v
}

// takeCalls returns the Version calls per pod since the last call.
func (f *podTokens) takeCalls() map[types.UID]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	calls := f.calls
	f.calls = map[types.UID]int{}
	return calls
}

// TestTokenVolumesOfNamedPodsOnly: with VolatileByPod, a pass computes
// again the token volumes of the pods NotifyPod named, not every pod's; a
// full pass computes them all (the safety net) and sees a version that
// changed unannounced.
func TestTokenVolumesOfNamedPodsOnly(t *testing.T) {
	tokens := &podTokens{versions: map[types.UID]string{"u1": "token:1", "u2": "token:1"}, calls: map[types.UID]int{}}
	tokenVol := v1.Volume{Name: "api", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}},
	}}}}
	src := newSource("api", true, testPod("u1", "one", tokenVol), testPod("u2", "two", tokenVol))
	desired := dsw.New(nil)
	p := New(Config{Sources: []source.Source{src}, Desired: desired, Logger: zaptest.NewLogger(t), Resync: time.Hour, VolatileByPod: true,
		Plugins: plugins.Default(plugins.Config{Mounter: &mount.Fake{}, NodeName: "node-1", Tokens: tokens})})
	h := &harness{p: p, desired: desired}
	p.Populate()
	if calls := tokens.takeCalls(); calls["u1"] == 0 || calls["u2"] == 0 {
		t.Fatalf("first pass read the versions %v, want both pods'", calls)
	}
	p.Populate()
	if calls := tokens.takeCalls(); len(calls) != 0 {
		t.Errorf("a pass nothing named read the token versions %v, want none", calls)
	}
	tokens.set("u1", "token:2")
	tokens.set("u2", "token:2")
	p.NotifyPod("u1")
	p.Populate()
	if calls := tokens.takeCalls(); calls["u1"] == 0 || calls["u2"] != 0 {
		t.Errorf("a pass after NotifyPod(u1) read the versions %v, want u1's only", calls)
	}
	if v := h.volume(t, "u1", "api"); !strings.HasSuffix(v.Version, "/token:2") {
		t.Errorf("u1's version = %q, want the new token's", v.Version)
	}
	if v := h.volume(t, "u2", "api"); !strings.HasSuffix(v.Version, "/token:1") {
		t.Errorf("u2's version = %q, want the old one until its pod is named or a full pass", v.Version)
	}
	p.PopulateAll()
	if v := h.volume(t, "u2", "api"); !strings.HasSuffix(v.Version, "/token:2") {
		t.Errorf("u2's version after a full pass = %q, want the new token's", v.Version)
	}
}
