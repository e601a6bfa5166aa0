package binder

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/reclaim"
	"github.com/volume-agent/volume-agent/internal/suggest"
)

// opsState is what the driver's operations (provisioning, moving aside,
// restoring and deleting storage, one at a time per PersistentVolume name)
// report to a pass. Its zero value reports nothing.
type opsState struct {
	// running holds the PV names with an operation in flight.
	running map[string]bool
	// made holds the PersistentVolumes provisioned and not recorded yet.
	made map[string]*v1.PersistentVolume
	// asided holds the PV names whose storage a MoveAside put aside since
	// the agent started, while their record is in step Aside.
	asided map[string]bool
	// restored holds the PV names whose storage a Restore put back, until
	// their record is Bound again.
	restored map[string]bool
	// deleted holds the PV names whose storage was deleted and whose
	// record is not dropped yet.
	deleted map[string]bool
	// failed holds the error of the last failed operation on a PV name,
	// until one succeeds or no operation is wanted any more.
	failed map[string]string
	// expanded holds, by PV name, the size (a quantity) its storage was
	// grown to, until its record no longer asks for that size.
	expanded map[string]string
	// taken holds, by handle, the snapshots taken and not recorded Ready
	// yet; snapDeleted those deleted whose record is not dropped yet.
	taken       map[string]SnapshotInfo
	snapDeleted map[string]bool
}

// provisionOp asks the driver to call Provision of the named provisioner.
type provisionOp struct {
	provisioner string
	req         provisioner.Request
	// content is what the volume is made from; nil: an empty volume.
	content *contentIntent
}

// storageOp asks the driver to move aside, restore or delete the storage
// of pv with the named provisioner.
type storageOp struct {
	action      reclaim.Action
	provisioner string
	pv          *v1.PersistentVolume
}

// deletable reports whether r is a provisioned PersistentVolume whose
// storage is deleted once released: reclaim policy Delete.
func (r record) deletable() bool {
	return r.Provisioned != nil && r.Provisioned.Spec.PersistentVolumeReclaimPolicy == v1.PersistentVolumeReclaimDelete
}

// provisionedBy names the provisioner of a provisioned PersistentVolume.
func (r record) provisionedBy() string {
	if r.Provisioned == nil {
		return ""
	}
	return provisioner.Canonical(r.Provisioned.Annotations[provisioner.AnnProvisionedBy])
}

// recordMade records every PersistentVolume just provisioned, in place of
// the record of its provisioning: Bound to its claim when the claim is
// still in the source, else Released, so that its storage is reclaimed
// like any other and nothing is left behind. The claim
// cannot hold another record meanwhile (bindUsed waits for a running
// provision), but if it did, the PersistentVolume stays unrecorded rather
// than give a claim two records.
func (o *outcome) recordMade(w world) {
	claims := w.claimSet()
	for _, name := range slices.Sorted(maps.Keys(w.ops.made)) {
		pv := w.ops.made[name]
		ref := pv.Spec.ClaimRef
		k := claimKey{namespace: ref.Namespace, name: ref.Name, uid: ref.UID}
		if r, ok := o.recs[name]; ok && r.Phase != phaseProvisioning { // recorded already
			continue
		}
		if r, ok := o.recs.of(k); ok && r.PV != name {
			continue
		}
		r := record{Namespace: k.namespace, Name: k.name, UID: k.uid, PV: name, Phase: PhaseBound, Provisioned: pv}
		if p := o.recs[name].Provisioning; p != nil && p.Content != nil {
			r.Source = &sourceRef{Kind: p.Content.Kind, Name: p.Content.Name}
		}
		msg := "claim bound to a provisioned PersistentVolume"
		if !claims[k] {
			r.Phase, r.ReleasedAt, msg = PhaseReleased, w.now, "provisioned PersistentVolume released: its claim left while it was provisioned"
		}
		o.recs[name] = r
		o.events = append(o.events, event{msg: msg, claim: k, pv: name})
	}
}

// waiting says why claim c, used and not bound, must wait before it is
// matched: the PersistentVolume it released is being restored or deleted,
// or a PersistentVolume is being provisioned for it. "" when it need not.
func (o *outcome) waiting(w world, c *v1.PersistentVolumeClaim) string {
	if why := o.pending[keyOf(c)]; why != "" { // set by settleReleased
		return why
	}
	if r, ok := o.recs.of(keyOf(c)); ok && r.Phase == phaseProvisioning {
		return provisioningWhy(w, r.PV, r.Provisioning.Class.Name)
	} else if ok {
		return fmt.Sprintf("the PersistentVolume %q it released is not given back yet", r.PV)
	}
	if name, err := pvNameFor(c, w.node.Name); err == nil && w.ops.running[name] {
		return fmt.Sprintf("provisioning PersistentVolume %q", name)
	}
	return ""
}

// provisioningWhy is the pending reason of a claim whose PersistentVolume
// name is being provisioned with class.
func provisioningWhy(w world, name, class string) string {
	if err := w.ops.failed[name]; err != "" {
		return fmt.Sprintf("provisioning PersistentVolume %q (StorageClass %q) failed, retrying: %s", name, class, err)
	}
	return fmt.Sprintf("provisioning PersistentVolume %q (StorageClass %q)", name, class)
}

// provisionRecorded asks the driver to run every provisioning recorded and
// not made yet. After a restart the call is made again, whatever the
// source holds: it finds what the call a crash cut short made, and
// recordMade records it, Released when its claim has gone meanwhile, so
// that it is reclaimed like any other storage rather than left behind
// unknown. A provisioning
// that failed while no pod uses its claim is dropped (a failed Provision
// leaves nothing); one whose provisioner this agent does not run waits.
func (o *outcome) provisionRecorded(w world) {
	claims, used := w.claimSet(), usedClaims(w.pods, w.claims)
	var known func() []*v1.PersistentVolume
	for _, r := range o.recs.sorted() {
		if r.Phase != phaseProvisioning {
			continue
		}
		k, p := r.claim(), r.Provisioning
		switch {
		case w.ops.failed[r.PV] != "" && !w.ops.running[r.PV] && (!claims[k] || !used[k.String()]):
			o.drop(r, "provisioning dropped: it failed, and no pod uses its claim")
		case w.provisioners[provisioner.Canonical(p.Provisioner)]:
			if known == nil {
				known = o.knownPVs(w)
			}
			o.provisions = append(o.provisions, provisionOp{provisioner: provisioner.Canonical(p.Provisioner), req: provisioner.Request{
				Claim: p.Claim, Class: p.Class, PVName: r.PV, SelectedNode: w.node.Name, PVs: known,
			}, content: p.Content})
		}
	}
}

// knownPVs lists the PersistentVolumes that exist as far as this pass
// knows: those of the source and those the binder provisioned (recorded,
// with those just made), so that a provisioner whose storage could meet
// another PV's (nfs-subdir's pathPattern) refuses a volume that would,
// in manifest mode as in cluster mode.
func (o *outcome) knownPVs(w world) func() []*v1.PersistentVolume {
	pvs := slices.Clone(w.pvs)
	for _, r := range o.recs.sorted() {
		if r.Provisioned != nil {
			pvs = append(pvs, r.Provisioned)
		}
	}
	return func() []*v1.PersistentVolume { return pvs }
}

// didYouMean suggests the class of classes that name, which names none,
// is most likely a misspelling of: ` (did you mean "x"?)`, or "".
func didYouMean(name string, classes map[string]*storagev1.StorageClass) string {
	if near := suggest.Nearest(name, slices.Collect(maps.Keys(classes))); near != "" {
		return fmt.Sprintf(" (did you mean %q?)", near)
	}
	return ""
}

// provision decides for claim c, which no PersistentVolume fits (why): if
// its StorageClass exists and names a provisioner the agent runs, a
// record of its provisioning (phaseProvisioning), which provisionRecorded
// turns into a provisionOp once it is on disk. It returns the claim's
// pending reason, the cause first (a table that cuts it still shows it).
// A class missing from the synced source makes the claim wait, as any
// missing object does, with the nearest class named as a suggestion; it
// never falls back to another class.
func (o *outcome) provision(w world, c *v1.PersistentVolumeClaim, why string) string {
	return o.provisionWith(w, c, why, nil)
}

// provisionFrom decides for claim c, which names a data source: the
// provisioning of a volume made from it (content), once it can be.
func (o *outcome) provisionFrom(w world, c *v1.PersistentVolumeClaim) string {
	content, why := o.content(w, c)
	if content == nil {
		return why
	}
	return o.provisionWith(w, c, fmt.Sprintf("claim %s is made from %s %q", keyOf(c), content.Kind, content.Name), content)
}

// provisionWith is provision of a volume made from content (nil: empty).
func (o *outcome) provisionWith(w world, c *v1.PersistentVolumeClaim, why string, content *contentIntent) string {
	className := storagehelpers.GetPersistentVolumeClaimClass(c)
	switch {
	case className == "":
		return why
	case c.Spec.VolumeName != "":
		return why + "; a claim that names its PersistentVolume (spec.volumeName) is never provisioned: it waits for that PersistentVolume"
	case c.Spec.Selector != nil:
		return why + "; a claim with a selector is never provisioned (a provisioner cannot make a PersistentVolume match it): it waits for a PersistentVolume that matches"
	case c.Spec.VolumeAttributesClassName != nil && *c.Spec.VolumeAttributesClassName != "":
		return why + "; a claim with a volumeAttributesClassName is never provisioned (the agent's provisioners make no volumes of an attributes class): it waits for a PersistentVolume of that class"
	}
	class, ok := w.classes[className]
	switch {
	case !ok:
		return fmt.Sprintf("StorageClass %q does not exist%s: %s", className, didYouMean(className, w.classes), why)
	case !w.provisioners[provisioner.Canonical(class.Provisioner)]:
		return fmt.Sprintf("StorageClass %q names provisioner %q, which this agent does not run: %s", className, class.Provisioner, why)
	case content != nil && contentClassProblem(class, content) != "":
		return contentClassProblem(class, content)
	}
	name, err := pvNameFor(c, w.node.Name)
	if err != nil {
		return err.Error()
	}
	if _, ok := o.recs[name]; !ok { // the provisioning is recorded first; provisionRecorded asks for it
		k := keyOf(c)
		o.recs[name] = record{Namespace: k.namespace, Name: k.name, UID: k.uid, PV: name, Phase: phaseProvisioning,
			Provisioning: &provisionIntent{Provisioner: provisioner.Canonical(class.Provisioner), Claim: c, Class: class, Content: content}}
		o.events = append(o.events, event{msg: "provisioning recorded", claim: k, pv: name})
	}
	return provisioningWhy(w, name, className)
}

// pvNameFor is the name of the PersistentVolume provisioned for c,
// provisioner.PVName: pvc-<uid>, so that a retry after a crash finds the
// same storage. A manifest claim without metadata.uid is known by its
// namespace and name alone (see claimKey), so its UID is derived from
// them and from the node's name: agents of two nodes that share a storage
// root never derive the same name for their claims of the same name. A UID
// that does not make a valid PersistentVolume name is an error.
func pvNameFor(c *v1.PersistentVolumeClaim, node string) (string, error) {
	if c.UID == "" {
		s := sha256.Sum256([]byte(node + "\x00" + c.Namespace + "/" + c.Name))
		return fmt.Sprintf("pvc-%x-%x-%x-%x-%x", s[0:4], s[4:6], s[6:8], s[8:10], s[10:16]), nil
	}
	name := provisioner.PVName(c)
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return "", fmt.Errorf("claim %s: metadata.uid %q does not make a valid PersistentVolume name %q to provision: %v",
			keyOf(c), c.UID, name, msgs)
	}
	return name, nil
}

// cloning names the claim being cloned from PersistentVolume pv (a
// provisioning under way whose content it is), or "".
func (o *outcome) cloning(pv string) string {
	for _, r := range o.recs.sorted() {
		if p := r.Provisioning; p != nil && p.Content != nil && p.Content.Volume != nil && p.Content.Volume.Name == pv {
			return r.claim().String()
		}
	}
	return ""
}
