package provisioner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Event reasons on claims, as the external provisioners use them.
const (
	ReasonProvisioning          = "Provisioning"
	ReasonProvisioningSucceeded = "ProvisioningSucceeded"
	ReasonProvisioningFailed    = "ProvisioningFailed"
)

// syncClaim provisions a PV for the claim when it is this controller's to
// provision and has none yet.
func (c *Controller) syncClaim(ctx context.Context, namespace, name string) error {
	claim, err := c.claims.PersistentVolumeClaims(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	class, ok, err := c.wants(claim)
	if !ok || err != nil {
		return err
	}
	pvName := PVName(claim)
	if made, err := c.pvExists(ctx, pvName); made || err != nil {
		return err // made before: the PV controller binds it
	}
	return c.provision(ctx, Request{Claim: claim, Class: class, PVName: pvName, SelectedNode: claim.Annotations[AnnSelectedNode]})
}

// pvExists reports whether the PV named name exists: in the cache, else
// by a read from the API server, as the cache may not have seen a PV this
// controller created a moment ago for the same claim.
func (c *Controller) pvExists(ctx context.Context, name string) (bool, error) {
	if _, err := c.pvs.Get(name); err == nil {
		return true, nil
	}
	_, err := c.client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("read PersistentVolume %s: %w", name, err)
}

// wants reports whether claim is to be provisioned here, and its class.
// A claim that names this provisioner but whose class is not known yet is
// an error, so it is retried; a class that appears later also wakes it.
func (c *Controller) wants(claim *v1.PersistentVolumeClaim) (*storagev1.StorageClass, bool, error) {
	if claim.Spec.VolumeName != "" || claim.DeletionTimestamp != nil || claim.Status.Phase != v1.ClaimPending {
		return nil, false, nil
	}
	if p := claim.Annotations[AnnStorageProvisioner]; p != c.name && (p != "" || claim.Annotations[AnnBetaStorageProvisioner] != c.name) {
		return nil, false, nil
	}
	if c.cfg.Node != "" && claim.Annotations[AnnSelectedNode] != c.cfg.Node {
		return nil, false, nil // another node's, or not scheduled yet
	}
	className := ""
	if claim.Spec.StorageClassName != nil {
		className = *claim.Spec.StorageClassName
	}
	class, err := c.classes.Get(className)
	if err != nil {
		return nil, false, fmt.Errorf("claim %s/%s: StorageClass %q: %w", claim.Namespace, claim.Name, className, err)
	}
	return class, class.Provisioner == c.name, nil
}

// provision makes the storage and the PV. The PV is created only while the
// claim still exists with the same UID, read from the API server, not the
// cache; storage made for a claim that went away is deleted again.
func (c *Controller) provision(ctx context.Context, req Request) error {
	log := c.log.With(zap.String("claim", req.Claim.Namespace+"/"+req.Claim.Name), zap.String("pv", req.PVName))
	c.event(req.Claim, v1.EventTypeNormal, ReasonProvisioning, fmt.Sprintf("External provisioner is provisioning volume for claim %q", req.Claim.Namespace+"/"+req.Claim.Name))
	opCtx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
	defer cancel()
	vol, err := c.cfg.Provisioner.Provision(opCtx, req)
	if err != nil {
		return c.failed(ctx, req, err)
	}
	pv := NewPV(req, c.name, vol)
	if c.cfg.PauseAfterStorage > 0 {
		log.Info("pausing between storage and PV (test hook)", zap.Duration("pause", c.cfg.PauseAfterStorage))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.cfg.PauseAfterStorage):
		}
	}
	if gone, err := c.claimGone(ctx, req.Claim); err != nil || gone {
		if err != nil {
			return err
		}
		log.Info("claim deleted while provisioning; deleting its storage")
		return c.cfg.Provisioner.Delete(opCtx, neverUsed(pv))
	}
	_, err = c.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		c.event(req.Claim, v1.EventTypeWarning, ReasonProvisioningFailed, fmt.Sprintf("create PersistentVolume %s: %v", pv.Name, err))
		return fmt.Errorf("create PersistentVolume %s: %w", pv.Name, err)
	}
	if gone, err := c.claimGone(ctx, req.Claim); err == nil && gone {
		// Deleted between the check and the create: the PV was never
		// bound and holds no data.
		log.Info("claim deleted while provisioning; deleting its PV and storage")
		return c.deleteUnbound(opCtx, pv)
	}
	log.Info("provisioned", zap.String("node", req.SelectedNode))
	c.event(req.Claim, v1.EventTypeNormal, ReasonProvisioningSucceeded, fmt.Sprintf("Successfully provisioned volume %s", pv.Name))
	return nil
}

// failed records a failed Provision; when this node cannot provision, it
// gives the claim back to the scheduler by removing selected-node.
func (c *Controller) failed(ctx context.Context, req Request, err error) error {
	msg := fmt.Sprintf("failed to provision volume with StorageClass %q: %v", req.Class.Name, err)
	c.event(req.Claim, v1.EventTypeWarning, ReasonProvisioningFailed, msg)
	if !errors.Is(err, ErrReschedule) || req.SelectedNode == "" {
		return fmt.Errorf("claim %s/%s: %w", req.Claim.Namespace, req.Claim.Name, err)
	}
	if uerr := c.unselectNode(ctx, req.Claim); uerr != nil {
		return fmt.Errorf("claim %s/%s: %w (and removing %s: %v)", req.Claim.Namespace, req.Claim.Name, err, AnnSelectedNode, uerr)
	}
	c.log.Info("this node cannot provision; the scheduler chooses again",
		zap.String("claim", req.Claim.Namespace+"/"+req.Claim.Name), zap.Error(err))
	return nil
}

// unselectNode removes the selected-node annotation from the claim, as the
// external provisioners do, so that the scheduler places the pod again.
func (c *Controller) unselectNode(ctx context.Context, claim *v1.PersistentVolumeClaim) error {
	cl := claim.DeepCopy()
	delete(cl.Annotations, AnnSelectedNode)
	_, err := c.client.CoreV1().PersistentVolumeClaims(cl.Namespace).Update(ctx, cl, metav1.UpdateOptions{})
	return err
}

// claimGone reports whether the claim no longer exists with its UID.
func (c *Controller) claimGone(ctx context.Context, claim *v1.PersistentVolumeClaim) (bool, error) {
	got, err := c.client.CoreV1().PersistentVolumeClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	}
	return got.UID != claim.UID || got.DeletionTimestamp != nil, nil
}

// deleteUnbound deletes a PV this controller just made, and its storage.
func (c *Controller) deleteUnbound(ctx context.Context, pv *v1.PersistentVolume) error {
	if err := c.cfg.Provisioner.Delete(ctx, neverUsed(pv)); err != nil {
		return err
	}
	return c.deletePV(ctx, pv.Name, "")
}

// deletePV deletes the PV named name, only while its UID is uid (any when
// empty). A PV already gone is not an error.
func (c *Controller) deletePV(ctx context.Context, name string, uid types.UID) error {
	opts := metav1.DeleteOptions{}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := c.client.CoreV1().PersistentVolumes().Delete(ctx, name, opts)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete PersistentVolume %s: %w", name, err)
	}
	return nil
}

// neverUsed returns a copy of a PV no pod ever used, whose storage is
// removed, not archived: there is nothing in it to keep.
func neverUsed(pv *v1.PersistentVolume) *v1.PersistentVolume {
	pv = pv.DeepCopy()
	pv.Annotations[AnnArchiveOnDelete] = "false"
	return pv
}
