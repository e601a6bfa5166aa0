package binder

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/component-helpers/storage/ephemeral"

	"github.com/volume-agent/volume-agent/internal/source"
)

// madeClaim is a claim the binder made from the volumeClaimTemplate of a
// generic ephemeral volume, as kube-controller-manager's ephemeral volume
// controller makes it: named <pod name>-<volume name> in the pod's
// namespace, controlled by the pod, with the template's labels,
// annotations and spec. It is recorded in the state file before any view
// shows it or anything is provisioned for it, so that a restart finds it
// and never makes a second claim. Its UID is derived from the pod's UID,
// the volume's name and a nonce drawn when it was made (evidence.NewNonce)
// and recorded beside it: a pod that reuses a gone pod's name (and, from
// manifests, its UID) gets a claim of its own, never the old one's
// storage, which its release keeps for the old claim alone.
type madeClaim struct {
	// PodUID and Volume are the pod and its volume the claim is made for.
	PodUID types.UID `json:"podUID"`
	Volume string    `json:"volume"`
	// Nonce is the record of the claim's creation; "" in a claim made by
	// an agent from before nonces, whose UID derives from PodUID and
	// Volume alone.
	Nonce string `json:"nonce,omitempty"`
	// Claim is the claim as made; a read-only snapshot.
	Claim *v1.PersistentVolumeClaim `json:"claim"`
}

// madeClaims are the made claims by "namespace/name". A madeClaims value
// is never modified once published; makeClaims returns a new one.
type madeClaims map[string]madeClaim

// sorted returns the made claims by namespace and name.
func (m madeClaims) sorted() []madeClaim {
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, func(a, b madeClaim) int {
		return cmp.Or(cmp.Compare(a.Claim.Namespace, b.Claim.Namespace), cmp.Compare(a.Claim.Name, b.Claim.Name))
	})
	return out
}

// makeClaims returns the made claims after a pass over w (whose claims are
// the inner source's), and why a template cannot be made into a claim, by
// the claim's "namespace/name". A claim is made for every generic
// ephemeral volume of a pod that is not terminated, unless a claim of that
// name exists (made, or in the source: as the ephemeral volume controller,
// the binder never replaces a claim, and the populator refuses one the pod
// does not own). A made claim is forgotten once it is released (reclaimed
// as its class says), even when a pod of its pod's UID is listed again, or
// once its pod is not in w and it has no record (never bound); a Bound
// one stays until its release (madeRemovalPending). Pure: prev and recs
// are not modified.
func makeClaims(w world, prev madeClaims, recs records) (madeClaims, map[string]string) {
	next := maps.Clone(prev)
	if next == nil {
		next = madeClaims{}
	}
	pods := make(map[types.UID]bool, len(w.pods))
	for _, pod := range w.pods {
		pods[pod.UID] = true
	}
	for key, m := range prev {
		// A released claim is over, even when a pod of its pod's UID is
		// listed again (a pod that reuses the name of one whose removal
		// counted): that pod gets a claim of its own, made below with a
		// new nonce, never this one's storage.
		r, ok := recs.of(keyOf(m.Claim))
		if (ok && r.Phase == PhaseReleased) || (!ok && !pods[m.PodUID]) {
			delete(next, key)
		}
	}
	inner := make(map[string]bool, len(w.claims))
	for _, c := range w.claims {
		inner[keyOf(c).String()] = true
	}
	refused := map[string]string{}
	for _, pod := range w.pods {
		if source.Terminated(pod) {
			continue
		}
		for i := range pod.Spec.Volumes {
			vol := &pod.Spec.Volumes[i]
			key := pod.Namespace + "/" + ephemeral.VolumeClaimName(pod, vol)
			if vol.Ephemeral == nil || inner[key] {
				continue
			}
			if _, ok := next[key]; ok {
				continue
			}
			nonce := w.nonce()
			c, err := claimFromTemplate(pod, vol, nonce)
			if err != nil {
				refused[key] = err.Error()
				continue
			}
			next[key] = madeClaim{PodUID: pod.UID, Volume: vol.Name, Nonce: nonce, Claim: c}
		}
	}
	return next, refused
}

// claimFromTemplate makes the claim of the ephemeral volume vol of pod,
// created with nonce, or says which field of its template the agent does
// not support.
func claimFromTemplate(pod *v1.Pod, vol *v1.Volume, nonce string) (*v1.PersistentVolumeClaim, error) {
	what := fmt.Sprintf("ephemeral volume %q of pod %s/%s", vol.Name, pod.Namespace, pod.Name)
	tmpl := vol.Ephemeral.VolumeClaimTemplate
	if tmpl == nil {
		return nil, fmt.Errorf("%s: volumeClaimTemplate is required", what)
	}
	if field := setMetadataField(tmpl.ObjectMeta); field != "" {
		return nil, fmt.Errorf("%s: volumeClaimTemplate.metadata.%s is not supported: only labels and annotations are "+
			"(the claim is named %s and owned by the pod)", what, field, ephemeral.VolumeClaimName(pod, vol))
	}
	name := ephemeral.VolumeClaimName(pod, vol)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("%s: its claim's name %q (<pod name>-<volume name>) is not valid: %s", what, name, errs[0])
	}
	switch {
	case tmpl.Spec.DataSource != nil:
		return nil, fmt.Errorf("%s: volumeClaimTemplate.spec.dataSource is not supported: the agent makes only empty volumes", what)
	case tmpl.Spec.DataSourceRef != nil:
		return nil, fmt.Errorf("%s: volumeClaimTemplate.spec.dataSourceRef is not supported: the agent makes only empty volumes", what)
	}
	controller := true
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   pod.Namespace,
			Name:        name,
			UID:         madeUID(pod.UID, vol.Name, nonce),
			Labels:      maps.Clone(tmpl.Labels),
			Annotations: maps.Clone(tmpl.Annotations),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
				Controller: &controller, BlockOwnerDeletion: &controller}},
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}, nil
}

// setMetadataField names (by its JSON name) a field of a template's
// metadata other than labels and annotations that is set, or returns "".
// As the API server's validation does, it checks every field by
// reflection, so that a field added to ObjectMeta later is refused too.
func setMetadataField(meta metav1.ObjectMeta) string {
	val := reflect.ValueOf(meta)
	for i := range val.NumField() {
		name := strings.Split(val.Type().Field(i).Tag.Get("json"), ",")[0]
		if name != "labels" && name != "annotations" && !val.Field(i).IsZero() {
			return name
		}
	}
	return ""
}

// madeUID is the UID of the claim made, with nonce, for the ephemeral
// volume named volume of the pod with UID pod: the same after any restart,
// since the nonce is recorded. An empty nonce gives the UID of the claims
// made before nonces.
func madeUID(pod types.UID, volume, nonce string) types.UID {
	in := "ephemeral\x00" + string(pod) + "\x00" + volume
	if nonce != "" {
		in += "\x00" + nonce
	}
	s := sha256.Sum256([]byte(in))
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", s[0:4], s[4:6], s[6:8], s[8:10], s[10:16]))
}

// withMade returns the claims of the inner source, those a made claim of
// the same name shadows left out, and the made claims whose pod is in
// pods, sorted by namespace and name.
func withMade(inner []*v1.PersistentVolumeClaim, made madeClaims, pods []*v1.Pod) []*v1.PersistentVolumeClaim {
	if len(made) == 0 {
		return inner
	}
	out := make([]*v1.PersistentVolumeClaim, 0, len(inner)+len(made))
	for _, c := range inner {
		if _, ok := made[keyOf(c).String()]; !ok {
			out = append(out, c)
		}
	}
	listed := make(map[types.UID]bool, len(pods))
	for _, pod := range pods {
		listed[pod.UID] = true
	}
	for _, m := range made {
		if listed[m.PodUID] {
			out = append(out, m.Claim)
		}
	}
	slices.SortFunc(out, func(a, b *v1.PersistentVolumeClaim) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// ephemeralClaims returns "namespace/name" of the claim of every generic
// ephemeral volume of pod that one of claims is, controlled by the pod.
func ephemeralClaims(pod *v1.Pod, claims map[string]*v1.PersistentVolumeClaim) []string {
	var out []string
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		if vol.Ephemeral == nil {
			continue
		}
		key := pod.Namespace + "/" + ephemeral.VolumeClaimName(pod, vol)
		if c := claims[key]; c != nil && ephemeral.VolumeIsForPod(pod, c) == nil {
			out = append(out, key)
		}
	}
	return out
}
