package provisioner

import (
	"context"
	"fmt"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/evidence"
	"github.com/volume-agent/volume-agent/internal/reclaim"
)

// live gathers the facts evidence.Step checks a recorded step against
// from pv as it is now; claimGone says whether its claimRef's claim is
// gone by UID.
func live(pv *v1.PersistentVolume, claimGone bool) evidence.Live {
	l := evidence.Live{
		Released:   pv.Status.Phase == v1.VolumeReleased && claimGone,
		Delete:     pv.Spec.PersistentVolumeReclaimPolicy == v1.PersistentVolumeReclaimDelete,
		ReleasedBy: evidence.Owner{UID: types.UID(pv.Annotations[AnnReleasedBy])},
	}
	if ref := pv.Spec.ClaimRef; ref != nil {
		l.Claim = evidence.Owner{UID: ref.UID}
	}
	return l
}

// claimGoneCached reports whether the cache holds no claim of pv's
// claimRef's UID; false when pv names no claim.
func (c *Controller) claimGoneCached(pv *v1.PersistentVolume) bool {
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.UID == "" {
		return false
	}
	claim, err := c.claims.PersistentVolumeClaims(ref.Namespace).Get(ref.Name)
	switch {
	case apierrors.IsNotFound(err):
		return true
	case err != nil:
		return false
	}
	return claim.UID != ref.UID
}

// confirmed reads pv and its claim again from the API server before
// anything is destroyed, given back or recorded as the claim that
// released it, and reports whether the PV, as it is there, still has the
// recorded state s and permits use (evidence.Step). It returns the PV as
// read. A PV whose step is refused now is recorded as such (refuse); one
// that changed otherwise is left to its next sync, which the change
// enqueues.
func (c *Controller) confirmed(ctx context.Context, pv *v1.PersistentVolume, s reclaim.State, use evidence.Use) (*v1.PersistentVolume, bool, error) {
	fresh, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("read PersistentVolume %s again before its reclaim step %q: %w", pv.Name, s.Step, err)
	}
	now, ok, err := c.reclaimState(fresh)
	if !ok || err != nil || fresh.UID != pv.UID || now != s {
		return nil, false, err
	}
	gone, err := c.claimRefGone(ctx, fresh)
	if err != nil {
		return nil, false, err
	}
	switch v := evidence.Step(s.Step, live(fresh, gone)); v.Use {
	case use:
		return fresh, true, nil
	case evidence.Refuse:
		return nil, false, c.refuse(ctx, fresh, s, v.Why)
	}
	return nil, false, nil
}

// claimRefGone reports whether pv's claimRef's claim is gone by UID, as
// the API server says; false when pv names no claim.
func (c *Controller) claimRefGone(ctx context.Context, pv *v1.PersistentVolume) (bool, error) {
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.UID == "" {
		return false, nil
	}
	gone, err := c.claimGone(ctx, &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID}})
	if err != nil {
		return false, fmt.Errorf("read claim %s/%s of PersistentVolume %s: %w", ref.Namespace, ref.Name, pv.Name, err)
	}
	return gone, nil
}

// refuse leaves the storage of pv where it is: its recorded step s is not
// what the PV's live state permits, for the reason why. The reason is
// recorded on the PV (AnnReclaimRefused) and, when it is new, told in a
// Warning event with what to do, and in the log. A PV with no step
// recorded has nothing to refuse.
func (c *Controller) refuse(ctx context.Context, pv *v1.PersistentVolume, s reclaim.State, why string) error {
	if s.Step == reclaim.Released || pv.Annotations[AnnReclaimRefused] == why {
		return nil
	}
	pv = pv.DeepCopy()
	pv.Annotations[AnnReclaimRefused] = why
	updated, err := c.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("record on PersistentVolume %s why its reclaim step %q is refused: %w", pv.Name, s.Step, err)
	}
	c.event(updated, v1.EventTypeWarning, ReasonVolumeReclaimRefused,
		fmt.Sprintf("Reclaim step %s recorded in annotation %s is not acted on: %s. %s", s.Step, AnnReclaimStep, why, advice(s.Step)))
	c.log.Warn("recorded reclaim step refused", zap.String("pv", pv.Name), zap.String("step", string(s.Step)), zap.String("reason", why))
	return nil
}

// clearRefusal removes the reason a step was refused from pv, whose step
// is gone.
func (c *Controller) clearRefusal(ctx context.Context, pv *v1.PersistentVolume) error {
	pv = pv.DeepCopy()
	delete(pv.Annotations, AnnReclaimRefused)
	if _, err := c.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("remove annotation %s from PersistentVolume %s: %w", AnnReclaimRefused, pv.Name, err)
	}
	return nil
}

// advice says what an operator can do about a refused step.
func advice(s reclaim.Step) string {
	if s == reclaim.Deleting {
		return fmt.Sprintf("If no deletion was meant, remove the annotation %s; to finish the deletion, "+
			"let the PersistentVolume be Released (its claim deleted) with reclaim policy Delete", AnnReclaimStep)
	}
	return fmt.Sprintf("To give the storage back to the claim that released it, set spec.claimRef back to that claim "+
		"(its UID is in annotation %s) and the reclaim policy to Retain; to delete it, "+
		"let the PersistentVolume be Released (its claim deleted) with reclaim policy Delete", AnnReleasedBy)
}
