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
	// ReasonProvisioningAbandoned says that a claim was deleted while it
	// was provisioned, and its storage kept (a Settler says why).
	ReasonProvisioningAbandoned = "ProvisioningAbandoned"
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
	if claim.Spec.VolumeName != "" {
		return c.resize(ctx, claim)
	}
	class, ok, err := c.wants(claim)
	if !ok || err != nil {
		return err
	}
	pvName := PVName(claim)
	pv, err := c.existingPV(ctx, pvName)
	if err != nil {
		return err
	}
	if pv != nil {
		// Made before: the PV controller binds it. A Commit that failed, or
		// that a crash cut off, is done again while the claim waits.
		opCtx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
		defer cancel()
		return c.commit(opCtx, pv)
	}
	if err := unsupported(claim); err != nil {
		// Not retried: nothing changes until the claim does, and an
		// update of the claim enqueues it again.
		c.event(claim, v1.EventTypeWarning, ReasonProvisioningFailed, err.Error())
		return nil
	}
	return c.provision(ctx, Request{Claim: claim, Class: class, PVName: pvName, SelectedNode: claim.Annotations[AnnSelectedNode]})
}

// existingPV returns the PV named name, or nil when it does not exist: from
// the cache, else read from the API server, as the cache may not have seen
// a PV this controller created a moment ago for the same claim.
func (c *Controller) existingPV(ctx context.Context, name string) (*v1.PersistentVolume, error) {
	if pv, err := c.pvs.Get(name); err == nil {
		return pv, nil
	}
	pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return pv, nil
	case apierrors.IsNotFound(err):
		return nil, nil
	}
	return nil, fmt.Errorf("read PersistentVolume %s: %w", name, err)
}

// wants reports whether claim is to be provisioned here, and its class.
// A claim that names this provisioner but whose class is not known yet is
// an error, so it is retried; a class that appears later also wakes it.
func (c *Controller) wants(claim *v1.PersistentVolumeClaim) (*storagev1.StorageClass, bool, error) {
	if claim.Spec.VolumeName != "" || claim.DeletionTimestamp != nil || claim.Status.Phase != v1.ClaimPending {
		return nil, false, nil
	}
	if p := claimProvisioner(claim); Canonical(p) != c.name || c.leftToCSI(p) {
		return nil, false, nil // another provisioner's, or the CSI driver's
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
	if c.leftToCSI(class.Provisioner) {
		// The claim names the legacy name, its class (made again under the
		// same name since) the CSI driver: the external-provisioner does
		// not serve the claim either.
		c.event(claim, v1.EventTypeWarning, ReasonProvisioningFailed, fmt.Sprintf(
			"claim names provisioner %s but its StorageClass %q names %s, served by the CSI driver: recreate the claim so that both name the same provisioner",
			claimProvisioner(claim), className, class.Provisioner))
		return nil, false, nil
	}
	return class, Canonical(class.Provisioner) == c.name, nil
}

// provision makes the storage and the PV. The PV is created only while the
// claim still exists with the same UID, read from the API server, not the
// cache; storage made for a claim that went away is abandoned (see
// abandon).
func (c *Controller) provision(ctx context.Context, req Request) error {
	log := c.log.With(zap.String("claim", req.Claim.Namespace+"/"+req.Claim.Name), zap.String("pv", req.PVName))
	c.event(req.Claim, v1.EventTypeNormal, ReasonProvisioning, fmt.Sprintf("External provisioner is provisioning volume for claim %q", req.Claim.Namespace+"/"+req.Claim.Name))
	req.PVs, req.Tentative = c.existingPVs, true
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
		return c.abandon(opCtx, log, req, pv)
	}
	_, err = c.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		c.event(req.Claim, v1.EventTypeWarning, ReasonProvisioningFailed, fmt.Sprintf("create PersistentVolume %s: %v", pv.Name, err))
		return fmt.Errorf("create PersistentVolume %s: %w", pv.Name, err)
	}
	c.noteCreated(pv)
	if gone, err := c.claimGone(ctx, req.Claim); err == nil && gone {
		// Deleted between the check and the create: the PV was never
		// bound and holds no data.
		return c.deleteUnbound(opCtx, log, req, pv)
	}
	log.Info("provisioned", zap.String("node", req.SelectedNode))
	c.event(req.Claim, v1.EventTypeNormal, ReasonProvisioningSucceeded, fmt.Sprintf("Successfully provisioned volume %s", pv.Name))
	return c.commit(opCtx, pv)
}

// commit tells a Settler that pv, which this controller provisioned,
// exists.
func (c *Controller) commit(ctx context.Context, pv *v1.PersistentVolume) error {
	s, ok := c.cfg.Provisioner.(Settler)
	if !ok || Canonical(pv.Annotations[AnnProvisionedBy]) != c.name || pv.Spec.CSI != nil {
		return nil // another's, or a CSI PV of the same name (the external-provisioner names PVs pvc-<claim UID> too)
	}
	if err := s.Commit(ctx, pv); err != nil {
		return fmt.Errorf("PersistentVolume %s exists; settle its storage: %w", pv.Name, err)
	}
	return nil
}

// abandon takes back the storage Provision made for req, whose claim went
// away before pv was used. A Settler removes only what this provisioning
// made and nothing has written to, and says why it keeps anything else;
// another provisioner's storage, named after the PV and so never there
// before, is deleted as a PV's that never held data.
func (c *Controller) abandon(ctx context.Context, log *zap.Logger, req Request, pv *v1.PersistentVolume) error {
	s, ok := c.cfg.Provisioner.(Settler)
	if !ok {
		log.Info("claim deleted while provisioning; deleting its storage")
		return c.cfg.Provisioner.Delete(ctx, neverUsed(pv))
	}
	kept, err := s.Abandon(ctx, req, pv)
	switch {
	case err != nil:
		return err
	case kept != "":
		log.Info("claim deleted while provisioning; its storage is kept", zap.String("reason", kept))
		c.event(req.Claim, v1.EventTypeNormal, ReasonProvisioningAbandoned, "Claim deleted while provisioning; "+kept)
	default:
		log.Info("claim deleted while provisioning; its storage is taken back")
	}
	return nil
}

// settleLeftovers settles the provisionings r recorded and never settled
// (a crash between the storage and the PV): Commit where the PV exists,
// Abandon where the claim is gone, as the API server says, not the cache.
// One that cannot be settled now is logged and tried again later.
func (c *Controller) settleLeftovers(ctx context.Context, r Resumer) {
	left, err := r.Unsettled(ctx)
	if err != nil {
		c.log.Warn("unfinished provisionings not settled", zap.Error(err))
		return
	}
	for _, u := range left {
		log := c.log.With(zap.String("claim", u.Claim.Namespace+"/"+u.Claim.Name), zap.String("pv", u.PV.Name))
		if err := c.settleLeftover(ctx, log, r, u); err != nil {
			log.Warn("unfinished provisioning not settled", zap.Error(err))
		}
	}
}

func (c *Controller) settleLeftover(ctx context.Context, log *zap.Logger, r Resumer, u Unsettled) error {
	opCtx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
	defer cancel()
	pv, err := c.client.CoreV1().PersistentVolumes().Get(opCtx, u.PV.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		return r.Commit(opCtx, pv)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("read PersistentVolume %s: %w", u.PV.Name, err)
	}
	gone, err := c.claimGone(opCtx, u.Claim)
	if err != nil || !gone {
		return err // its provisioning goes on, and finds the storage
	}
	log.Info("claim deleted while the agent was down, after its storage was made and before its PersistentVolume; taking the storage back")
	return c.abandon(opCtx, log, Request{Claim: u.Claim, PVName: u.PV.Name}, u.PV)
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
		return fmt.Errorf("claim %s/%s: %w (and removing %s: %w)", req.Claim.Namespace, req.Claim.Name, err, AnnSelectedNode, uerr)
	}
	c.log.Warn("this node cannot provision; the scheduler chooses again",
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

// deleteUnbound abandons the storage of a PV this controller just made for
// req, whose claim is gone, and deletes the PV.
func (c *Controller) deleteUnbound(ctx context.Context, log *zap.Logger, req Request, pv *v1.PersistentVolume) error {
	if err := c.abandon(ctx, log, req, pv); err != nil {
		return err
	}
	if err := c.deletePV(ctx, pv.Name, ""); err != nil {
		return err
	}
	c.forgetCreated(pv.Name) // the informer may never have shown it
	return nil
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

// The claims no provisioner of the agent serves, as the external
// provisioners refuse them.
var (
	errSelector = errors.New("claim Selector is not supported: a provisioner cannot make a PersistentVolume that matches it")
	errVAC      = errors.New("claim volumeAttributesClassName is not supported: volume-agent's provisioners make no volumes of an attributes class")
)

// unsupported says why claim cannot be provisioned whatever happens, or
// returns nil.
func unsupported(claim *v1.PersistentVolumeClaim) error {
	switch {
	case claim.Spec.Selector != nil:
		return errSelector
	case claim.Spec.VolumeAttributesClassName != nil && *claim.Spec.VolumeAttributesClassName != "":
		return errVAC
	}
	return nil
}
