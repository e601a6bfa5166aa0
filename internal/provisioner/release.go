package provisioner

import (
	"context"
	"fmt"
	"slices"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Event reasons on PVs.
const ReasonVolumeFailedDelete = "VolumeFailedDelete"

// syncPV deletes the storage, then the PV, of a PV this controller serves
// once the PV controller has released it and its policy is Delete.
func (c *Controller) syncPV(ctx context.Context, name string) error {
	pv, err := c.pvs.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !c.deletes(pv) {
		return nil
	}
	log := c.log.With(zap.String("pv", pv.Name))
	opCtx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
	defer cancel()
	if err := c.cfg.Provisioner.Delete(opCtx, pv); err != nil {
		c.event(pv, v1.EventTypeWarning, ReasonVolumeFailedDelete, err.Error())
		return fmt.Errorf("delete the storage of PersistentVolume %s: %w", pv.Name, err)
	}
	if err := c.deletePV(ctx, pv.Name, pv.UID); err != nil {
		return err
	}
	log.Info("released volume deleted", zap.Bool("archived", pv.Annotations[AnnArchiveOnDelete] == "true"))
	return nil
}

// deletes reports whether pv is a Released PV of this provisioner, with
// policy Delete, on this node when the controller is node-local.
func (c *Controller) deletes(pv *v1.PersistentVolume) bool {
	return pv.Annotations[AnnProvisionedBy] == c.name &&
		pv.Status.Phase == v1.VolumeReleased &&
		pv.Spec.PersistentVolumeReclaimPolicy == v1.PersistentVolumeReclaimDelete &&
		pv.DeletionTimestamp == nil &&
		(c.cfg.Node == "" || OnNode(pv, c.cfg.Node))
}

// OnNode reports whether pv's required node affinity is exactly the
// kubernetes.io/hostname of node, as the local provisioner writes it.
func OnNode(pv *v1.PersistentVolume, node string) bool {
	na := pv.Spec.NodeAffinity
	if na == nil || na.Required == nil || len(na.Required.NodeSelectorTerms) != 1 {
		return false
	}
	exprs := na.Required.NodeSelectorTerms[0].MatchExpressions
	return len(exprs) == 1 && exprs[0].Key == v1.LabelHostname &&
		exprs[0].Operator == v1.NodeSelectorOpIn && slices.Equal(exprs[0].Values, []string{node})
}
