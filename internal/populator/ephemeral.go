package populator

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/storage/ephemeral"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// claimName is the claim a claim volume uses: persistentVolumeClaim's
// claimName, or for a generic ephemeral volume the claim
// <pod name>-<volume name> made for it (by kube-controller-manager's
// ephemeral volume controller, or from manifests by the agent's binder).
func claimName(spec *volume.Spec) string {
	if spec.Volume.Ephemeral != nil {
		return ephemeral.VolumeClaimName(spec.Pod, spec.Volume)
	}
	return spec.Volume.PersistentVolumeClaim.ClaimName
}

// ownedByPod checks, for a generic ephemeral volume, that claim was made
// for the pod (it is controlled by the pod's UID), as the kubelet does: a
// claim of that name made by someone else is never used, whatever it holds.
func ownedByPod(spec *volume.Spec, claim *v1.PersistentVolumeClaim) error {
	if spec.Volume.Ephemeral == nil {
		return nil
	}
	return ephemeral.VolumeIsForPod(spec.Pod, claim)
}

// ephemeralNotCreated says why a generic ephemeral volume waits for its
// claim (what): it has not been made from the template yet.
func ephemeralNotCreated(what string) string {
	return what + " of the ephemeral volume is not created yet (kube-controller-manager's ephemeral volume controller " +
		"makes it from volumeClaimTemplate; from manifests, the agent does)"
}
