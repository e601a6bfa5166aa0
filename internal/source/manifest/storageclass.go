package manifest

import (
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/volume-agent/volume-agent/internal/provisioner"
)

// normalizeStorageClass checks the fields of a StorageClass that decide
// what a provisioner does, and sets the API server's defaults: reclaimPolicy
// Delete, volumeBindingMode Immediate.
func normalizeStorageClass(c *storagev1.StorageClass) error {
	if c.Provisioner == "" {
		return errors.New("provisioner is missing")
	}
	if msgs := validation.IsQualifiedName(strings.ToLower(c.Provisioner)); len(msgs) > 0 {
		return hint(fmt.Errorf("invalid provisioner %q: %s", c.Provisioner, strings.Join(msgs, "; ")), "provisioner")
	}
	if err := defaultReclaimPolicy(c); err != nil {
		return err
	}
	if err := defaultBindingMode(c); err != nil {
		return err
	}
	if strings.HasPrefix(c.Provisioner, "volume-agent.io/") {
		// A typo in archiveOnDelete must never delete data meant to be archived.
		if _, err := provisioner.ArchiveOnDelete(c); err != nil {
			return hint(fmt.Errorf("parameters.%s %q: want \"true\" or \"false\"", provisioner.ParamArchiveOnDelete,
				c.Parameters[provisioner.ParamArchiveOnDelete]), "parameters", provisioner.ParamArchiveOnDelete)
		}
	}
	return nil
}

func defaultReclaimPolicy(c *storagev1.StorageClass) error {
	if c.ReclaimPolicy == nil {
		p := v1.PersistentVolumeReclaimDelete
		c.ReclaimPolicy = &p
	}
	switch *c.ReclaimPolicy {
	case v1.PersistentVolumeReclaimDelete, v1.PersistentVolumeReclaimRetain:
		return nil
	}
	return hint(fmt.Errorf("invalid reclaimPolicy %q: want Delete or Retain", *c.ReclaimPolicy), "reclaimPolicy")
}

func defaultBindingMode(c *storagev1.StorageClass) error {
	if c.VolumeBindingMode == nil {
		m := storagev1.VolumeBindingImmediate
		c.VolumeBindingMode = &m
	}
	switch *c.VolumeBindingMode {
	case storagev1.VolumeBindingImmediate, storagev1.VolumeBindingWaitForFirstConsumer:
		return nil
	}
	return hint(fmt.Errorf("invalid volumeBindingMode %q: want Immediate or WaitForFirstConsumer", *c.VolumeBindingMode), "volumeBindingMode")
}
