package binder

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/volume-agent/volume-agent/internal/provisioner"
)

// opsState is what the driver's operations (provisioning and deleting
// storage, one at a time per PersistentVolume name) report to a pass. Its
// zero value reports nothing.
type opsState struct {
	// running holds the PV names with an operation in flight.
	running map[string]bool
	// made holds the PersistentVolumes provisioned and not recorded yet.
	made map[string]*v1.PersistentVolume
	// deleted holds the PV names whose storage was deleted and whose
	// record is not dropped yet.
	deleted map[string]bool
	// failed holds the error of the last failed operation on a PV name,
	// until one succeeds or no operation is wanted any more.
	failed map[string]string
}

// deleting reports whether the storage of r's PersistentVolume is being
// deleted: a Delete is running, has succeeded, or has failed (perhaps half
// done). Such a PersistentVolume is never given back to a claim.
func (s opsState) deleting(r record) bool {
	return r.deletable() && (s.running[r.PV] || s.deleted[r.PV] || s.failed[r.PV] != "")
}

// provisionOp asks the driver to call Provision of the named provisioner.
type provisionOp struct {
	provisioner string
	req         provisioner.Request
}

// deleteOp asks the driver to call Delete of the named provisioner.
type deleteOp struct {
	provisioner string
	pv          *v1.PersistentVolume
}

// deletable reports whether r is a provisioned PersistentVolume whose
// storage is deleted once released: reclaim policy Delete.
func (r record) deletable() bool {
	return r.Provisioned != nil && r.Provisioned.Spec.PersistentVolumeReclaimPolicy == v1.PersistentVolumeReclaimDelete
}

// recordMade records every PersistentVolume just provisioned: Bound to its
// claim when the claim is still in the source, else Released, so that its
// storage is reclaimed like any other and nothing is left behind. The claim
// cannot hold another record meanwhile (bindUsed waits for a running
// provision), but if it did, the PersistentVolume stays unrecorded rather
// than give a claim two records.
func (o *outcome) recordMade(w world) {
	claims := make(map[claimKey]bool, len(w.claims))
	for _, c := range w.claims {
		claims[keyOf(c)] = true
	}
	for _, name := range slices.Sorted(maps.Keys(w.ops.made)) {
		pv := w.ops.made[name]
		ref := pv.Spec.ClaimRef
		k := claimKey{namespace: ref.Namespace, name: ref.Name, uid: ref.UID}
		if _, ok := o.recs[name]; ok || o.recs.has(k) {
			continue
		}
		r := record{Namespace: k.namespace, Name: k.name, UID: k.uid, PV: name, Phase: PhaseBound, Provisioned: pv}
		msg := "claim bound to a provisioned PersistentVolume"
		if !claims[k] {
			r.Phase, msg = PhaseReleased, "provisioned PersistentVolume released: its claim left while it was provisioned"
		}
		o.recs[name] = r
		o.events = append(o.events, event{msg: msg, claim: k, pv: name})
	}
}

// reclaim deletes the storage of every Released provisioned PersistentVolume
// with reclaim policy Delete that no pod that is not terminated still names
// by its claim (as pvc-protection would keep the claim), and drops its
// record once the deletion succeeded. A deletion once attempted is retried
// until it succeeds, whoever names the claim by then: its storage may be
// half gone. Retain keeps record and storage. A PersistentVolume whose
// provisioner the agent does not run is kept.
func (o *outcome) reclaim(w world) {
	used := usedClaims(w.pods)
	for _, r := range o.recs.sorted() {
		if r.Phase != PhaseReleased || !r.deletable() {
			continue
		}
		by := r.Provisioned.Annotations[provisioner.AnnProvisionedBy]
		switch {
		case w.ops.deleted[r.PV]:
			delete(o.recs, r.PV)
			o.events = append(o.events, event{msg: "storage of released PersistentVolume deleted; binding dropped", claim: r.claim(), pv: r.PV})
		case w.ops.running[r.PV], used[r.Namespace+"/"+r.Name] && !w.ops.deleting(r), !w.provisioners[by]:
		default:
			o.deletes = append(o.deletes, deleteOp{provisioner: by, pv: r.Provisioned})
		}
	}
}

// waiting says why claim c, used and not bound, must wait before it is
// matched: the PersistentVolume it released is being deleted, or a
// PersistentVolume is being provisioned for it. "" when it need not.
func (o *outcome) waiting(w world, c *v1.PersistentVolumeClaim) string {
	if r, ok := o.recs.of(keyOf(c)); ok { // settle binds again every other Released record of a claim here
		return fmt.Sprintf("the PersistentVolume %q it released is being deleted (reclaim policy Delete); "+
			"the claim is provisioned again once it is gone", r.PV)
	}
	if name, err := pvNameFor(c); err == nil && w.ops.running[name] {
		return fmt.Sprintf("provisioning PersistentVolume %q", name)
	}
	return ""
}

// provision decides for claim c, which no PersistentVolume fits (why): if
// its StorageClass exists and names a provisioner the agent runs, a
// provisionOp. It returns the claim's pending reason. A class missing from
// the synced source makes the claim wait, as any missing object does; it
// never falls back to another class.
func (o *outcome) provision(w world, c *v1.PersistentVolumeClaim, why string) string {
	className := storagehelpers.GetPersistentVolumeClaimClass(c)
	if className == "" {
		return why
	}
	class, ok := w.classes[className]
	switch {
	case !ok:
		return fmt.Sprintf("%s; StorageClass %q does not exist", why, className)
	case !w.provisioners[class.Provisioner]:
		return fmt.Sprintf("%s; StorageClass %q names provisioner %q, which this agent does not run", why, className, class.Provisioner)
	}
	name, err := pvNameFor(c)
	if err != nil {
		return err.Error()
	}
	o.provisions = append(o.provisions, provisionOp{provisioner: class.Provisioner, req: provisioner.Request{
		Claim: c, Class: class, PVName: name, SelectedNode: w.node.Name,
	}})
	if err := w.ops.failed[name]; err != "" {
		return fmt.Sprintf("provisioning PersistentVolume %q (StorageClass %q) failed, retrying: %s", name, className, err)
	}
	return fmt.Sprintf("provisioning PersistentVolume %q (StorageClass %q)", name, className)
}

// pvNameFor is the name of the PersistentVolume provisioned for c,
// provisioner.PVName: pvc-<uid>, so that a retry after a crash finds the
// same storage. A manifest claim without metadata.uid is known by its
// namespace and name alone (see claimKey), so its UID is derived from them.
// A UID that does not make a valid PersistentVolume name is an error.
func pvNameFor(c *v1.PersistentVolumeClaim) (string, error) {
	if c.UID == "" {
		s := sha256.Sum256([]byte(c.Namespace + "/" + c.Name))
		return fmt.Sprintf("pvc-%x-%x-%x-%x-%x", s[0:4], s[4:6], s[6:8], s[8:10], s[10:16]), nil
	}
	name := provisioner.PVName(c)
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return "", fmt.Errorf("claim %s: metadata.uid %q does not make a valid PersistentVolume name %q to provision: %v",
			keyOf(c), c.UID, name, msgs)
	}
	return name, nil
}
