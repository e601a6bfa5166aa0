package populator

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// claimOutcome is what resolving a persistentVolumeClaim volume gave: the
// claim and its PV, or why the volume waits, or why it fails.
type claimOutcome struct {
	claim   *v1.PersistentVolumeClaim
	pv      *v1.PersistentVolume
	waiting string // the claim is not usable yet: the volume is Pending
	problem error  // the claim cannot be used: the volume is Failed
	// deleting says why the claim is being deleted: its volume stays as
	// it is set up while the pod runs, and is never set up anew.
	deleting error
}

// resolveClaim follows a pod's claim to its PersistentVolume, as the PV
// controller (or, from manifests, the agent's binder) left them. Nothing
// here ever makes the agent tear anything down: a claim that is missing or
// broken only fails or holds back this volume.
func resolveClaim(spec *volume.Spec) claimOutcome {
	name := claimName(spec)
	ns := spec.Pod.Namespace
	if name == "" {
		return claimOutcome{problem: errors.New("persistentVolumeClaim.claimName is required")}
	}
	what := "claim " + ns + "/" + name
	claim, err := spec.Objects.PersistentVolumeClaim(ns, name)
	switch {
	case errors.Is(err, volume.ErrNotReady):
		return claimOutcome{waiting: err.Error()}
	case errors.Is(err, volume.ErrNotFound) && spec.Volume.Ephemeral != nil:
		return claimOutcome{waiting: ephemeralNotCreated(what)}
	case errors.Is(err, volume.ErrNotFound):
		return claimOutcome{problem: fmt.Errorf("%s not found", what)}
	case err != nil:
		return claimOutcome{problem: fmt.Errorf("get %s: %w", what, err)}
	}
	if err := ownedByPod(spec, claim); err != nil {
		return claimOutcome{problem: err}
	}
	out := claimOutcome{claim: claim, deleting: deleting(claim, what)}
	switch {
	case claim.Status.Phase == v1.ClaimLost:
		out.problem = fmt.Errorf("%s is Lost: its PersistentVolume %q is gone", what, claim.Spec.VolumeName)
	case claim.Spec.VolumeName == "" || claim.Status.Phase != v1.ClaimBound:
		out.waiting = fmt.Sprintf("%s is not bound yet", what)
		if why := notBound(claim); why != "" {
			out.waiting += ": " + why
		}
	}
	if out.problem != nil || out.waiting != "" {
		return out
	}
	return followToPV(spec, out, what)
}

// followToPV looks up the claim's PV and checks that it is bound back to
// the claim and can be served.
func followToPV(spec *volume.Spec, out claimOutcome, what string) claimOutcome {
	claim := out.claim
	pv, err := spec.Objects.PersistentVolume(claim.Spec.VolumeName)
	switch {
	case errors.Is(err, volume.ErrNotReady) || errors.Is(err, volume.ErrNotFound):
		out.waiting = fmt.Sprintf("%s: PersistentVolume %s not found yet", what, claim.Spec.VolumeName)
		return out
	case err != nil:
		out.problem = fmt.Errorf("%s: get PersistentVolume %s: %w", what, claim.Spec.VolumeName, err)
		return out
	}
	out.pv = pv
	ref := pv.Spec.ClaimRef
	switch {
	case ref == nil:
		out.waiting = fmt.Sprintf("PersistentVolume %s is not bound to %s yet", pv.Name, what)
	case ref.Namespace != claim.Namespace || ref.Name != claim.Name:
		out.problem = fmt.Errorf("%s names PersistentVolume %s, which is bound to claim %s/%s", what, pv.Name, ref.Namespace, ref.Name)
	case ref.UID == "" && claim.UID != "":
		// Bound by name only (pre-bound, the binding not completed): not
		// yet this claim's by identity.
		out.waiting = fmt.Sprintf("PersistentVolume %s is not bound to %s yet: its claimRef has no uid", pv.Name, what)
	case ref.UID != claim.UID:
		// Compared whole: a claimRef with a UID never matches a claim
		// without one. Both are empty only for a claim of the manifests
		// without metadata.uid, which is its namespace and name there
		// (the binder made both views from one record).
		out.problem = fmt.Errorf("%s names PersistentVolume %s, which is bound to another claim of that name (uid %q, not %q)", what, pv.Name, ref.UID, claim.UID)
	case volumeMode(claim.Spec.VolumeMode) != volumeMode(pv.Spec.VolumeMode):
		out.problem = fmt.Errorf("%s asks for volumeMode %s but PersistentVolume %s has %s", what, volumeMode(claim.Spec.VolumeMode), pv.Name, volumeMode(pv.Spec.VolumeMode))
	default:
		if err := layout.ValidName(pv.Name); err != nil {
			out.problem = fmt.Errorf("PersistentVolume name: %w", err)
		}
	}
	return out
}

// deleting says why claim is being deleted, or nil: removed from the
// manifests while its binding is kept (volume.ClaimRemoved, in the words
// GET /v1/claims shows for it), or deleted in a cluster whose
// pvc-protection finalizer holds it while a pod uses it.
func deleting(claim *v1.PersistentVolumeClaim, what string) error {
	for _, c := range claim.Status.Conditions {
		if c.Type == volume.ClaimRemoved {
			// The binder's words, documented where it says them.
			return fmt.Errorf("%s %w", what, errors.New(c.Message))
		}
	}
	if claim.DeletionTimestamp != nil {
		return fmt.Errorf("%s is being deleted", what)
	}
	return nil
}

// notBound is why claim is not bound, as the binder that serves it says
// (volume.ClaimNotBound), or "".
func notBound(claim *v1.PersistentVolumeClaim) string {
	for _, c := range claim.Status.Conditions {
		if c.Type == volume.ClaimNotBound {
			return c.Message
		}
	}
	return ""
}

func volumeMode(m *v1.PersistentVolumeMode) v1.PersistentVolumeMode {
	if m == nil {
		return v1.PersistentVolumeFilesystem
	}
	return *m
}

// claimVolume describes a persistentVolumeClaim volume: named after its PV
// once the claim is bound, served by the plugin of the PV's type. A claim
// being deleted is described as bound, with a problem saying so: its
// volume is never set up anew, and one set up stays as it is
// (keepSetUpVolumes).
func (p *Populator) claimVolume(spec *volume.Spec) dsw.Volume {
	d := dsw.Volume{Name: spec.Volume.Name, Claim: claimName(spec)}
	out := resolveClaim(spec)
	if out.claim != nil && out.claim.Spec.VolumeName != "" {
		// Known from here on: the directory is named after the PV, so a
		// volume set up before (or found on disk) is recognised even while
		// the claim has a problem.
		d.Name, d.SpecName, d.PV = out.claim.Spec.VolumeName, spec.Volume.Name, out.claim.Spec.VolumeName
	}
	d = p.boundVolume(d, spec, out)
	if out.deleting != nil {
		d.Problem, d.Unsupported, d.Deleting = out.deleting.Error(), false, true
	}
	return d
}

// boundVolume describes the volume d of a claim as out resolved it.
func (p *Populator) boundVolume(d dsw.Volume, spec *volume.Spec, out claimOutcome) dsw.Volume {
	switch {
	case out.problem != nil:
		d.Problem = out.problem.Error()
		return d
	case out.waiting != "":
		d.Waiting = out.waiting
		return d
	}
	plugin, err := p.cfg.Plugins.FindPV(out.pv)
	if err != nil {
		d.Problem, d.Unsupported = err.Error(), isUnsupported(err)
		return d
	}
	d.Block = volume.Block(out.pv)
	if err := checkVolumeMode(spec.Pod, spec.Volume.Name, volumeMode(out.pv.Spec.VolumeMode)); err != nil {
		d.Problem = err.Error()
		return d
	}
	if _, ok := plugin.(volume.BlockMapper); d.Block && !ok {
		d.Problem = fmt.Sprintf("PersistentVolume %s has volumeMode Block, which its plugin %s does not serve", out.pv.Name, plugin.Name())
		return d
	}
	pvSpec := *spec
	pvSpec.Claim, pvSpec.PV = out.claim, out.pv
	return p.withPlugin(d, plugin, &pvSpec)
}
