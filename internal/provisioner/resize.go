package provisioner

import (
	"context"
	"fmt"
	"slices"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Event reasons of an expansion, as the external resizer and the kubelet
// use them.
const (
	ReasonResizing               = "Resizing"
	ReasonVolumeResizeFailed     = "VolumeResizeFailed"
	ReasonVolumeResizeSuccessful = "VolumeResizeSuccessful"
)

// resize is the external resizer and the kubelet's node expansion in one,
// for a bound claim whose PV this controller's provisioner made (on this
// node, when node-local) and can grow (Expander), of a class that allows
// expansion: when the claim asks for more than the PV has, it marks the
// claim Resizing with the size allocated, grows the storage online,
// records the PV's new capacity, then the claim's, and clears the
// condition. Each step is idempotent, and the claim's request is the
// record of what is wanted: a restart in between does it again. A
// request below the PV's capacity is refused with a Warning event.
func (c *Controller) resize(ctx context.Context, claim *v1.PersistentVolumeClaim) error {
	e, ok := c.cfg.Provisioner.(Expander)
	if !ok || claim.Status.Phase != v1.ClaimBound {
		return nil
	}
	pv, err := c.pvs.Get(claim.Spec.VolumeName)
	if err != nil || !c.resizes(pv, claim) {
		return nil //nolint:nilerr // a PV not in the cache: nothing to grow before the claim's next sync (its next update, or the resync)
	}
	want, ok := claim.Spec.Resources.Requests[v1.ResourceStorage]
	if !ok {
		return nil
	}
	have := pv.Spec.Capacity[v1.ResourceStorage]
	switch cmp := want.Cmp(have); {
	case cmp < 0:
		c.event(claim, v1.EventTypeWarning, ReasonVolumeResizeFailed, fmt.Sprintf(
			"spec.resources.requests.storage %s is below the capacity %s of PersistentVolume %q: a volume only grows, so the claim keeps %s",
			want.String(), have.String(), pv.Name, have.String()))
		return nil
	case cmp > 0:
		if claim, err = c.growPV(ctx, e, claim, pv, want); err != nil {
			return err
		}
	}
	got := claim.Status.Capacity[v1.ResourceStorage]
	if got.Cmp(want) >= 0 {
		if !resizing(claim) {
			return nil
		}
		// Grown again while the informer still showed the PV at its old
		// size: the claim was done already, and is marked Resizing now.
		want = got
	}
	return c.resized(ctx, claim, want)
}

// resizing reports whether claim carries the marks of an expansion under
// way (growPV's): a Resizing condition or a resize status.
func resizing(claim *v1.PersistentVolumeClaim) bool {
	_, inProgress := claim.Status.AllocatedResourceStatuses[v1.ResourceStorage]
	return inProgress || len(withoutResizing(claim.Status.Conditions)) != len(claim.Status.Conditions)
}

// resizes reports whether pv, bound to claim, is this controller's to grow.
func (c *Controller) resizes(pv *v1.PersistentVolume, claim *v1.PersistentVolumeClaim) bool {
	if !c.serves(pv) || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != claim.UID {
		return false
	}
	class, err := c.classes.Get(pv.Spec.StorageClassName)
	return err == nil && class.AllowVolumeExpansion != nil && *class.AllowVolumeExpansion
}

// growPV marks claim Resizing, grows the storage of pv to want and
// records want as the PV's capacity. It returns the claim as updated.
func (c *Controller) growPV(ctx context.Context, e Expander, claim *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, want resource.Quantity) (*v1.PersistentVolumeClaim, error) {
	log := c.log.With(zap.String("claim", claim.Namespace+"/"+claim.Name), zap.String("pv", pv.Name), zap.String("size", want.String()))
	claim = claim.DeepCopy()
	claim.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: want}
	claim.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimControllerResizeInProgress}
	claim.Status.Conditions = append(withoutResizing(claim.Status.Conditions), v1.PersistentVolumeClaimCondition{
		Type: v1.PersistentVolumeClaimResizing, Status: v1.ConditionTrue, LastTransitionTime: metav1.Now(),
		Message: fmt.Sprintf("expanding PersistentVolume %q to %s", pv.Name, want.String()),
	})
	updated, err := c.client.CoreV1().PersistentVolumeClaims(claim.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("mark claim %s/%s Resizing: %w", claim.Namespace, claim.Name, err)
	}
	claim = updated
	c.event(claim, v1.EventTypeNormal, ReasonResizing, fmt.Sprintf("External resizer is resizing volume %s", pv.Name))
	opCtx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
	defer cancel()
	if err := e.Expand(opCtx, pv, want.Value()); err != nil {
		c.event(claim, v1.EventTypeWarning, ReasonVolumeResizeFailed, err.Error())
		return nil, fmt.Errorf("expand PersistentVolume %s to %s: %w", pv.Name, want.String(), err)
	}
	pv = pv.DeepCopy()
	if pv.Spec.Capacity == nil {
		pv.Spec.Capacity = v1.ResourceList{}
	}
	pv.Spec.Capacity[v1.ResourceStorage] = want
	if _, err := c.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("record the capacity %s of PersistentVolume %s: %w", want.String(), pv.Name, err)
	}
	log.Info("expanded volume")
	return claim, nil
}

// resized records want as claim's capacity and clears its condition.
func (c *Controller) resized(ctx context.Context, claim *v1.PersistentVolumeClaim, want resource.Quantity) error {
	claim = claim.DeepCopy()
	if claim.Status.Capacity == nil {
		claim.Status.Capacity = v1.ResourceList{}
	}
	claim.Status.Capacity[v1.ResourceStorage] = want
	claim.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: want}
	delete(claim.Status.AllocatedResourceStatuses, v1.ResourceStorage)
	claim.Status.Conditions = withoutResizing(claim.Status.Conditions)
	if _, err := c.client.CoreV1().PersistentVolumeClaims(claim.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("record the capacity %s of claim %s/%s: %w", want.String(), claim.Namespace, claim.Name, err)
	}
	c.event(claim, v1.EventTypeNormal, ReasonVolumeResizeSuccessful, fmt.Sprintf("resize volume %s to %s succeeded", claim.Spec.VolumeName, want.String()))
	return nil
}

// withoutResizing is conds without the conditions of a resize.
func withoutResizing(conds []v1.PersistentVolumeClaimCondition) []v1.PersistentVolumeClaimCondition {
	return slices.DeleteFunc(slices.Clone(conds), func(c v1.PersistentVolumeClaimCondition) bool {
		return c.Type == v1.PersistentVolumeClaimResizing || c.Type == v1.PersistentVolumeClaimFileSystemResizePending ||
			c.Type == v1.PersistentVolumeClaimControllerResizeError || c.Type == v1.PersistentVolumeClaimNodeResizeError
	})
}
