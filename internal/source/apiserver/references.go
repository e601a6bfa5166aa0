package apiserver

import (
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/volume-agent/volume-agent/internal/source"
)

// podRefs is what one pod's volumes refer to, each object once.
type podRefs struct{ configMaps, secrets []ref }

// references lists the ConfigMaps and Secrets the pods' volumes refer to
// (including projected sources and the kube-root-ca.crt ConfigMap of
// kube-api-access volumes): the union of referencesOf over the pods.
func references(pods []*v1.Pod) (configMaps, secrets map[ref]bool) {
	configMaps, secrets = map[ref]bool{}, map[ref]bool{}
	for _, p := range pods {
		refs := referencesOf(p)
		for _, r := range refs.configMaps {
			configMaps[r] = true
		}
		for _, r := range refs.secrets {
			secrets[r] = true
		}
	}
	return configMaps, secrets
}

// referencesOf lists the ConfigMaps and Secrets one pod's volumes refer
// to; none for a terminated pod, whose volumes are torn down.
func referencesOf(p *v1.Pod) podRefs {
	var out podRefs
	if source.Terminated(p) {
		return out
	}
	for _, v := range p.Spec.Volumes {
		addVolumeRefs(p.Namespace, v.VolumeSource, &out)
	}
	return out
}

func addVolumeRefs(ns string, v v1.VolumeSource, out *podRefs) {
	if v.ConfigMap != nil {
		out.configMaps = addRef(out.configMaps, ref{ns, v.ConfigMap.Name})
	}
	if v.Secret != nil {
		out.secrets = addRef(out.secrets, ref{ns, v.Secret.SecretName})
	}
	if v.Projected == nil {
		return
	}
	for _, s := range v.Projected.Sources {
		if s.ConfigMap != nil {
			out.configMaps = addRef(out.configMaps, ref{ns, s.ConfigMap.Name})
		}
		if s.Secret != nil {
			out.secrets = addRef(out.secrets, ref{ns, s.Secret.Name})
		}
	}
}

// addRef appends r unless refs holds it: a pod refers to a few objects.
func addRef(refs []ref, r ref) []ref {
	if slices.Contains(refs, r) {
		return refs
	}
	return append(refs, r)
}

// without returns the refs of a that b does not hold.
func without(a, b []ref) []ref {
	var out []ref
	for _, r := range a {
		if !slices.Contains(b, r) {
			out = append(out, r)
		}
	}
	return out
}

// referenceTracker keeps the watched ConfigMaps and Secrets in step with
// the pods one pod event at a time: it remembers what each pod of the store
// referred to and hands the objects only the difference, so that an event
// costs the size of its pod, not of the node's pods and objects. The
// objects count the pods referring to each; the watched set is always the
// one references computes from every pod in the store.
type referenceTracker struct {
	configMaps, secrets *objects

	mu   sync.Mutex
	pods map[string]podRefs // guarded by mu; by store key; pods that refer to something
}

// set records that the pod under key (the store's key) now refers to
// refs: nothing when it is gone, terminated or on another node.
func (t *referenceTracker) set(key string, refs podRefs) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pods == nil {
		t.pods = map[string]podRefs{}
	}
	before := t.pods[key]
	if len(refs.configMaps)+len(refs.secrets) == 0 {
		delete(t.pods, key)
	} else {
		t.pods[key] = refs
	}
	t.configMaps.update(without(refs.configMaps, before.configMaps), without(before.configMaps, refs.configMaps))
	t.secrets.update(without(refs.secrets, before.secrets), without(before.secrets, refs.secrets))
}

// podEventKey is the store key of the pod of an event, also of a deleted
// pod's tombstone.
func podEventKey(obj any) (string, bool) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	return key, err == nil
}
