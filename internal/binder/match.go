package binder

import (
	"cmp"
	"fmt"
	"maps"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	schedulingv1 "k8s.io/component-helpers/scheduling/corev1"
	storagehelpers "k8s.io/component-helpers/storage/volume"
)

// maxListed is how many refused PersistentVolumes a "nothing fits" reason
// names; the rest are counted.
const maxListed = 4

// claimKey identifies a claim. A claim deleted and created again under the
// same name is another claim when its UID differs; manifest claims without
// metadata.uid all have the empty UID, so namespace and name decide.
type claimKey struct {
	namespace string
	name      string
	uid       types.UID
}

func keyOf(c *v1.PersistentVolumeClaim) claimKey {
	return claimKey{namespace: c.Namespace, name: c.Name, uid: c.UID}
}

// String is how claims are named in logs and reasons.
func (k claimKey) String() string { return k.namespace + "/" + k.name }

// candidates is what claims are matched against in one pass.
type candidates struct {
	// pvs are the PersistentVolumes of the source.
	pvs []*v1.PersistentVolume
	// node is this node, whose labels (with kubernetes.io/hostname) and name
	// a PersistentVolume's nodeAffinity must match.
	node *v1.Node
	// unavailable says, by PV name, which claim alone may take a
	// PersistentVolume, and why: bound or released by it per the records,
	// or named by its spec.volumeName.
	unavailable map[string]holder
}

// holder is the claim a PersistentVolume belongs to, and how.
type holder struct {
	claim claimKey
	why   string
}

// match chooses the PersistentVolume claim binds to, by the PV controller's
// rules: the PV named by spec.volumeName, else a PV pre-bound to the claim
// through its claimRef, else the smallest that fits (ties broken by name).
// It returns nil and why when none fits. It performs no I/O.
func match(claim *v1.PersistentVolumeClaim, c candidates) (*v1.PersistentVolume, string) {
	if claim.Spec.VolumeName != "" {
		return c.named(claim)
	}
	var sel labels.Selector
	if claim.Spec.Selector != nil {
		s, err := metav1.LabelSelectorAsSelector(claim.Spec.Selector)
		if err != nil {
			return nil, fmt.Sprintf("claim %s has an invalid selector: %v", keyOf(claim), err)
		}
		sel = s
	}
	var best *v1.PersistentVolume
	var refused []string
	for _, pv := range c.pvs {
		if storagehelpers.IsVolumeBoundToClaim(pv, claim) {
			if pv, why, final := c.preBound(claim, pv); final {
				return pv, why
			}
		}
		if why := c.refuse(claim, pv, sel); why != "" {
			refused = append(refused, pv.Name+": "+why)
			continue
		}
		if best == nil || smaller(pv, best) {
			best = pv
		}
	}
	if best == nil {
		return nil, noFit(keyOf(claim), refused)
	}
	return best, ""
}

// named checks the PersistentVolume the claim names in spec.volumeName: it
// must exist, be free or already this claim's, and satisfy the claim as
// the PV controller checks it (size, class, volumeAttributesClass,
// volumeMode, access modes), and be usable on this node. The selector does not apply, as in the PV
// controller.
func (c candidates) named(claim *v1.PersistentVolumeClaim) (*v1.PersistentVolume, string) {
	name := claim.Spec.VolumeName
	for _, pv := range c.pvs {
		if pv.Name != name {
			continue
		}
		why := cmp.Or(c.taken(claim, pv), satisfies(claim, pv), c.affinity(pv), classMismatch(claim, pv))
		if why != "" {
			return nil, fmt.Sprintf("PersistentVolume %q named by spec.volumeName of claim %s: %s", name, keyOf(claim), why)
		}
		return pv, ""
	}
	return nil, fmt.Sprintf("PersistentVolume %q named by spec.volumeName of claim %s does not exist", name, keyOf(claim))
}

// preBound decides on a PersistentVolume whose claimRef names the claim. It
// wins when it is free and satisfies the claim (volumeAttributesClass
// applies, class and selector do not, as in the PV controller). One that is for another node leaves the
// claim Pending (final), as the PV controller's matcher does; one that is
// too small or of the wrong mode is passed over.
func (c candidates) preBound(claim *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) (*v1.PersistentVolume, string, bool) {
	if c.taken(claim, pv) != "" || satisfies(claim, pv) != "" {
		return nil, "", false
	}
	if why := c.affinity(pv); why != "" {
		return nil, fmt.Sprintf("PersistentVolume %q is pre-bound to claim %s, but its %s", pv.Name, keyOf(claim), why), true
	}
	return pv, "", true
}

// refuse says why claim cannot take pv by size, or "" when it can.
func (c candidates) refuse(claim *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, sel labels.Selector) string {
	return cmp.Or(c.taken(claim, pv), satisfies(claim, pv), c.affinity(pv),
		classMismatch(claim, pv), selectorMismatch(sel, pv))
}

// taken says why pv belongs to another claim, or "".
func (c candidates) taken(claim *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) string {
	if h, ok := c.unavailable[pv.Name]; ok && h.claim != keyOf(claim) {
		return h.why
	}
	if ref := pv.Spec.ClaimRef; ref != nil && !storagehelpers.IsVolumeBoundToClaim(pv, claim) {
		return "pre-bound to " + ref.Namespace + "/" + ref.Name
	}
	if pv.DeletionTimestamp != nil {
		return "being deleted"
	}
	return ""
}

// satisfies says why pv is too small or of the wrong kind for claim, or "".
// It applies to every PersistentVolume a claim may take: matched, pre-bound
// or named by spec.volumeName.
func satisfies(claim *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) string {
	want := claim.Spec.Resources.Requests[v1.ResourceStorage]
	have := pv.Spec.Capacity[v1.ResourceStorage]
	if have.Cmp(want) < 0 {
		return fmt.Sprintf("too small (%s < %s)", quantity(have), quantity(want))
	}
	if storagehelpers.CheckVolumeModeMismatches(&claim.Spec, &pv.Spec) {
		return fmt.Sprintf("volumeMode %s ≠ %s", modeOf(pv.Spec.VolumeMode), modeOf(claim.Spec.VolumeMode))
	}
	if have, want := attributesClass(pv.Spec.VolumeAttributesClassName), attributesClass(claim.Spec.VolumeAttributesClassName); have != want {
		return fmt.Sprintf("volumeAttributesClass %q ≠ %q", have, want)
	}
	if !storagehelpers.CheckAccessModes(claim, pv) {
		return fmt.Sprintf("access modes %v lack some of %v", pv.Spec.AccessModes, claim.Spec.AccessModes)
	}
	return ""
}

// affinity says why pv cannot be used on this node, or "".
func (c candidates) affinity(pv *v1.PersistentVolume) string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return ""
	}
	ok, err := schedulingv1.MatchNodeSelectorTerms(c.node, pv.Spec.NodeAffinity.Required)
	switch {
	case err != nil:
		return fmt.Sprintf("node affinity is invalid: %v", err)
	case !ok:
		return fmt.Sprintf("node affinity check failed: its spec.nodeAffinity does not match node %q", c.node.Name)
	}
	return ""
}

// classMismatch compares storage classes, the beta annotation first; an
// empty class matches only an empty one.
func classMismatch(claim *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) string {
	want := storagehelpers.GetPersistentVolumeClaimClass(claim)
	if have := storagehelpers.GetPersistentVolumeClass(pv); have != want {
		return fmt.Sprintf("class %q ≠ %q", have, want)
	}
	return ""
}

func selectorMismatch(sel labels.Selector, pv *v1.PersistentVolume) string {
	if sel != nil && !sel.Matches(labels.Set(pv.Labels)) {
		return "labels do not match the claim's selector"
	}
	return ""
}

// smaller orders PersistentVolumes by capacity, then by name.
func smaller(a, b *v1.PersistentVolume) bool {
	qa, qb := a.Spec.Capacity[v1.ResourceStorage], b.Spec.Capacity[v1.ResourceStorage]
	if c := qa.Cmp(qb); c != 0 {
		return c < 0
	}
	return a.Name < b.Name
}

// noFit summarizes why every PersistentVolume was refused, naming at most
// maxListed of them.
func noFit(claim claimKey, refused []string) string {
	if len(refused) == 0 {
		return fmt.Sprintf("no PersistentVolume fits claim %s (none defined)", claim)
	}
	listed := refused[:min(len(refused), maxListed)]
	more := ""
	if n := len(refused) - len(listed); n > 0 {
		more = fmt.Sprintf(", and %d more", n)
	}
	return fmt.Sprintf("no PersistentVolume fits claim %s (%d checked: %s%s)",
		claim, len(refused), strings.Join(listed, ", "), more)
}

func quantity(q resource.Quantity) string {
	if q.IsZero() {
		return "0"
	}
	return q.String()
}

// attributesClass is a volumeAttributesClassName with nil meaning "": the PV
// controller (VolumeAttributesClass is on by default since Kubernetes 1.34)
// binds a claim only to a PersistentVolume of the same attributes class, and
// one without asks for a PersistentVolume without.
func attributesClass(name *string) string {
	if name == nil {
		return ""
	}
	return *name
}

// modeOf is a volumeMode with nil meaning Filesystem.
func modeOf(m *v1.PersistentVolumeMode) v1.PersistentVolumeMode {
	if m == nil {
		return v1.PersistentVolumeFilesystem
	}
	return *m
}

// thisNode is the node a PersistentVolume's nodeAffinity is matched
// against: named nodeName, with the labels of its Node object if the source
// has one, and kubernetes.io/hostname set to nodeName unless that object
// sets it.
func thisNode(node *v1.Node, nodeName string) *v1.Node {
	nodeLabels := map[string]string{v1.LabelHostname: nodeName}
	if node != nil {
		maps.Copy(nodeLabels, node.Labels)
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: nodeLabels}}
}
