package manifest

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/source/volumesnapshot"
)

// normalizeVolumeSnapshot checks what the binder takes a snapshot from:
// spec.source names a claim (of the snapshot's namespace), and
// spec.volumeSnapshotClassName, when given, a class. A pre-provisioned
// snapshot (spec.source.volumeSnapshotContentName) is refused: manifest
// mode has no VolumeSnapshotContent objects to import one from. A status
// written in the manifest is dropped, as the API server drops a status
// sent with a create: the agent reports its own.
func normalizeVolumeSnapshot(s *volumesnapshot.VolumeSnapshot) error {
	src := s.Spec.Source
	switch {
	case src.VolumeSnapshotContentName != nil:
		return hint(fmt.Errorf("spec.source.volumeSnapshotContentName %q: a pre-provisioned snapshot (VolumeSnapshotContent) "+
			"is not supported in manifest mode; name the claim to snapshot in spec.source.persistentVolumeClaimName instead",
			*src.VolumeSnapshotContentName), "spec", "source", "volumeSnapshotContentName")
	case src.PersistentVolumeClaimName == nil || *src.PersistentVolumeClaimName == "":
		return hint(fmt.Errorf("spec.source.persistentVolumeClaimName is missing: name the claim (in namespace %q) to snapshot",
			s.Namespace), "spec", "source")
	}
	if msgs := validation.IsDNS1123Subdomain(*src.PersistentVolumeClaimName); len(msgs) > 0 {
		return hint(fmt.Errorf("invalid spec.source.persistentVolumeClaimName %q: %s", *src.PersistentVolumeClaimName,
			strings.Join(msgs, "; ")), "spec", "source", "persistentVolumeClaimName")
	}
	if c := s.Spec.VolumeSnapshotClassName; c != nil {
		if msgs := validation.IsDNS1123Subdomain(*c); len(msgs) > 0 {
			return hint(fmt.Errorf("invalid spec.volumeSnapshotClassName %q: %s", *c, strings.Join(msgs, "; ")),
				"spec", "volumeSnapshotClassName")
		}
	}
	s.Status = nil
	return nil
}

// normalizeVolumeSnapshotClass checks the driver and the deletion policy.
// A class of the agent's driver with deletionPolicy Retain is refused: the
// agent deletes a snapshot once its VolumeSnapshot has stayed removed for
// the reclaim delay, and a snapshot kept without one could be neither
// restored nor deleted.
func normalizeVolumeSnapshotClass(c *volumesnapshot.VolumeSnapshotClass) error {
	if c.Driver == "" {
		return hint(fmt.Errorf("driver is missing (the agent's is %q)", provisioner.LocalName), "driver")
	}
	if msgs := validation.IsDNS1123Subdomain(strings.ToLower(c.Driver)); len(msgs) > 0 {
		return hint(fmt.Errorf("invalid driver %q: %s", c.Driver, strings.Join(msgs, "; ")), "driver")
	}
	switch c.DeletionPolicy {
	case volumesnapshot.DeletionPolicyDelete:
	case volumesnapshot.DeletionPolicyRetain:
		if c.Driver == provisioner.LocalName {
			return hint(fmt.Errorf("deletionPolicy Retain is not supported for driver %q in manifest mode: a snapshot is deleted "+
				"once its VolumeSnapshot has stayed removed from the manifests for --reclaim-delay, and one kept without it could be "+
				"neither restored nor deleted; use Delete, and keep the VolumeSnapshot to keep the snapshot", c.Driver), "deletionPolicy")
		}
	case "":
		return hint(fmt.Errorf("deletionPolicy is missing: want Delete or Retain"), "deletionPolicy")
	default:
		return hint(fmt.Errorf("invalid deletionPolicy %q: want Delete or Retain", c.DeletionPolicy), "deletionPolicy")
	}
	return nil
}
