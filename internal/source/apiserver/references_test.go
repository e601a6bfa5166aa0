package apiserver

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestReferences(t *testing.T) {
	cm := func(name string) v1.VolumeSource {
		return v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: name}}}
	}
	secret := func(name string) v1.VolumeSource {
		return v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: name}}
	}
	projected := func(sources ...v1.VolumeProjection) v1.VolumeSource {
		return v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: sources}}
	}
	pCM := func(name string) v1.VolumeProjection {
		return v1.VolumeProjection{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: name}}}
	}
	pSecret := func(name string) v1.VolumeProjection {
		return v1.VolumeProjection{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: name}}}
	}
	pod := func(ns string, sources ...v1.VolumeSource) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}}
		for _, s := range sources {
			p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "v", VolumeSource: s})
		}
		return p
	}
	for _, tc := range []struct {
		name                string
		pods                []*v1.Pod
		configMaps, secrets map[ref]bool
	}{
		{"no pods", nil, map[ref]bool{}, map[ref]bool{}},
		{"configMap and secret volumes", []*v1.Pod{pod("ns", cm("c"), secret("s"))},
			map[ref]bool{{"ns", "c"}: true}, map[ref]bool{{"ns", "s"}: true}},
		{"projected sources", []*v1.Pod{pod("ns", projected(pCM("kube-root-ca.crt"), pSecret("ps"),
			v1.VolumeProjection{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}},
			v1.VolumeProjection{DownwardAPI: &v1.DownwardAPIProjection{}}))},
			map[ref]bool{{"ns", "kube-root-ca.crt"}: true}, map[ref]bool{{"ns", "ps"}: true}},
		{"duplicates across volumes and pods", []*v1.Pod{pod("ns", cm("c"), projected(pCM("c"))), pod("ns", cm("c"), secret("s"), secret("s"))},
			map[ref]bool{{"ns", "c"}: true}, map[ref]bool{{"ns", "s"}: true}},
		{"same name in two namespaces", []*v1.Pod{pod("a", cm("c")), pod("b", cm("c"))},
			map[ref]bool{{"a", "c"}: true, {"b", "c"}: true}, map[ref]bool{}},
		{"other volume types ignored", []*v1.Pod{pod("ns",
			v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}},
			v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/x"}},
			v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{}},
			v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "claim"}})},
			map[ref]bool{}, map[ref]bool{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cms, secrets := references(tc.pods)
			if !reflect.DeepEqual(cms, tc.configMaps) {
				t.Errorf("configMaps = %v, want %v", cms, tc.configMaps)
			}
			if !reflect.DeepEqual(secrets, tc.secrets) {
				t.Errorf("secrets = %v, want %v", secrets, tc.secrets)
			}
		})
	}
}

// randomPod is a pod of namespace a or b named p0…p7 that refers to a few
// of the ConfigMaps and Secrets c0…c3 and s0…s3 in every way a volume can;
// some are on another node, some terminated.
func randomPod(rng *rand.Rand) *v1.Pod {
	ns := []string{"a", "b"}[rng.IntN(2)]
	var volumes []v1.VolumeSource
	for range rng.IntN(4) {
		cm, s := fmt.Sprint("c", rng.IntN(4)), fmt.Sprint("s", rng.IntN(4))
		switch rng.IntN(3) {
		case 0:
			volumes = append(volumes, cmVolume(cm))
		case 1:
			volumes = append(volumes, secretVolume(s))
		default:
			volumes = append(volumes, v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
				{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: cm}}},
				{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: s}}},
			}}})
		}
	}
	node := "node-1"
	if rng.IntN(6) == 0 {
		node = "node-2"
	}
	p := testPod(ns, fmt.Sprint("p", rng.IntN(8)), node, volumes...)
	if rng.IntN(6) == 0 {
		p.Status.Phase = v1.PodSucceeded
	}
	return p
}

// refCounts is how many of pods refer to each object, from scratch.
func refCounts(pods map[string]*v1.Pod, node string) (configMaps, secrets map[ref]int) {
	configMaps, secrets = map[ref]int{}, map[ref]int{}
	for _, p := range pods {
		if p.Spec.NodeName != node {
			continue
		}
		refs := referencesOf(p)
		for _, r := range refs.configMaps {
			configMaps[r]++
		}
		for _, r := range refs.secrets {
			secrets[r]++
		}
	}
	return configMaps, secrets
}

// TestReferenceTrackerCountsAsFromScratch: after every step of a random
// sequence of adds, updates and deletes, the tracker's counts are those
// computed from every pod, and the set they count is references'.
func TestReferenceTrackerCountsAsFromScratch(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 5))
	cms, secrets := &objects{runner: &runner{}}, &objects{runner: &runner{}}
	tr := &referenceTracker{configMaps: cms, secrets: secrets}
	pods := map[string]*v1.Pod{}
	for step := range 3000 {
		p := randomPod(rng)
		key := p.Namespace + "/" + p.Name
		if _, ok := pods[key]; ok && rng.IntN(3) == 0 {
			delete(pods, key)
			tr.set(key, podRefs{})
		} else {
			pods[key] = p
			refs := podRefs{}
			if p.Spec.NodeName == "node-1" {
				refs = referencesOf(p)
			}
			tr.set(key, refs)
		}
		wantCMs, wantSecrets := refCounts(pods, "node-1")
		if !maps.Equal(cms.refs, wantCMs) || !maps.Equal(secrets.refs, wantSecrets) {
			t.Fatalf("step %d: counts configMaps %v secrets %v, want %v %v", step, cms.refs, secrets.refs, wantCMs, wantSecrets)
		}
		var onNode []*v1.Pod
		for _, p := range pods {
			if p.Spec.NodeName == "node-1" {
				onNode = append(onNode, p)
			}
		}
		setCMs, setSecrets := references(onNode)
		if !sameKeys(cms.refs, setCMs) || !sameKeys(secrets.refs, setSecrets) {
			t.Fatalf("step %d: counted objects differ from references'", step)
		}
	}
}

// TestWatchedSetFollowsPodEvents: through the informer, after a random
// sequence of pod creates, updates and deletes (some pods on another
// node, which the fake API server does not filter out), the watched
// objects are exactly those references computes from this node's pods.
func TestWatchedSetFollowsPodEvents(t *testing.T) {
	h := newHarness(t)
	h.synced()
	rng := rand.New(rand.NewPCG(31, 2))
	pods := map[string]*v1.Pod{}
	for range 300 {
		p := randomPod(rng)
		key := p.Namespace + "/" + p.Name
		switch _, ok := pods[key]; {
		case ok && rng.IntN(3) == 0:
			h.delete(p)
			delete(pods, key)
		case ok:
			h.update(p)
			pods[key] = p
		default:
			h.create(p)
			pods[key] = p
		}
	}
	wantCMs, wantSecrets := refCounts(pods, "node-1")
	h.eventually("watched objects as computed from every pod", func() (bool, string) {
		gotCMs, gotSecrets := watchedSet(h.src.configMaps), watchedSet(h.src.secrets)
		fromStore, secretsFromStore := references(h.src.Pods())
		ok := sameKeys(wantCMs, gotCMs) && sameKeys(wantSecrets, gotSecrets) && sameKeys(wantCMs, fromStore) && sameKeys(wantSecrets, secretsFromStore)
		return ok, fmt.Sprintf("watched configMaps %v secrets %v; want %v %v", gotCMs, gotSecrets, wantCMs, wantSecrets)
	})
}

// watchedSet is the objects o watches.
func watchedSet(o *objects) map[ref]bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[ref]bool{}
	for r := range o.entries {
		out[r] = true
	}
	return out
}

// sameKeys reports whether a and b hold the same keys.
func sameKeys[A, B any](a map[ref]A, b map[ref]B) bool {
	if len(a) != len(b) {
		return false
	}
	for r := range a {
		if _, ok := b[r]; !ok {
			return false
		}
	}
	return true
}
