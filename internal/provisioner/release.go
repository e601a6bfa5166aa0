package provisioner

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/reclaim"
)

// The annotations that record, on a released PV, where its storage is on
// its way to deletion (package reclaim). They are written before the step
// is taken, so that an agent killed anywhere finishes it after a restart.
const (
	// AnnReclaimStep is the step: "Aside" or "Deleting".
	AnnReclaimStep = "volume-agent.io/reclaim-step"
	// AnnDeleteAfter is when the storage of a PV Aside is deleted
	// (RFC 3339), unless an operator sets the PV's reclaim policy to
	// Retain first.
	AnnDeleteAfter = "volume-agent.io/delete-after"
)

// Event reasons on PVs.
const (
	ReasonVolumeFailedDelete = "VolumeFailedDelete"
	ReasonVolumeMovedAside   = "VolumeMovedAside"
	ReasonVolumeRestored     = "VolumeRestored"
)

// syncPV takes the storage of a released PV this controller serves one
// step further (reclaim.Next): moved aside once no pod on this node has it
// set up, deleted with the PV once the reclaim delay has passed, or
// restored when an operator set the reclaim policy to Retain (or cleared
// the claimRef) while it was aside. Each step is recorded on the PV before
// it is taken.
func (c *Controller) syncPV(ctx context.Context, name string) error {
	pv, err := c.pvs.Get(name)
	if apierrors.IsNotFound(err) {
		c.forget(name)
		return nil
	}
	if err != nil {
		return err
	}
	if c.deletedUID(name) == pv.UID { // the cache has not seen the deletion yet
		return nil
	}
	state, ok, err := c.reclaimState(pv)
	if !ok || err != nil {
		return err
	}
	busy := c.cfg.InUse != nil && c.cfg.InUse(pv.Name)
	c.setWaiting(name, busy)
	next, action := reclaim.Next(state, reclaim.Facts{Now: time.Now(), Delay: c.cfg.ReclaimDelay, Wanted: keptBack(pv, state),
		InUse: busy, MovedAside: c.movedAside(name)})
	if next != state {
		if pv, err = c.recordStep(ctx, pv, next); err != nil {
			return err
		}
	}
	if action == reclaim.Wait {
		if due := reclaim.Due(next); !busy && due.After(time.Now()) {
			c.queue.AddAfter(key{pv: true, name: name}, time.Until(due))
		}
		return nil
	}
	return c.act(ctx, pv, next, action)
}

// reclaimState reads the step recorded on pv, and whether pv is one this
// controller reclaims: provisioned by it, on this node when it is
// node-local, not being deleted, and either Released with policy Delete
// or already on its way (a recorded step). An unknown or damaged record is
// an error: nothing is done on a guess.
func (c *Controller) reclaimState(pv *v1.PersistentVolume) (reclaim.State, bool, error) {
	if Canonical(pv.Annotations[AnnProvisionedBy]) != c.name || pv.DeletionTimestamp != nil || (c.cfg.Node != "" && !OnNode(pv, c.cfg.Node)) {
		return reclaim.State{}, false, nil
	}
	s := reclaim.State{Step: reclaim.Step(pv.Annotations[AnnReclaimStep])}
	if at := pv.Annotations[AnnDeleteAfter]; at != "" {
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return s, false, fmt.Errorf("PersistentVolume %s: annotation %s %q: %w", pv.Name, AnnDeleteAfter, at, err)
		}
		s.DeleteAfter = t
	}
	if err := reclaim.Valid(s); err != nil {
		return s, false, fmt.Errorf("PersistentVolume %s: annotation %s: %w", pv.Name, AnnReclaimStep, err)
	}
	released := pv.Status.Phase == v1.VolumeReleased && pv.Spec.PersistentVolumeReclaimPolicy == v1.PersistentVolumeReclaimDelete
	return s, released || s.Step != reclaim.Released, nil
}

// keptBack reports whether an operator wants the storage of pv, aside,
// back: its reclaim policy is no longer Delete, or it is no longer
// Released (its claimRef cleared for another claim).
func keptBack(pv *v1.PersistentVolume, s reclaim.State) bool {
	return s.Step == reclaim.Aside &&
		(pv.Spec.PersistentVolumeReclaimPolicy != v1.PersistentVolumeReclaimDelete || pv.Status.Phase != v1.VolumeReleased)
}

// recordStep writes step s on pv (no annotations for reclaim.Released) and
// returns the PV as written. A conflict is an error: the key is retried
// with the PV as it is now.
func (c *Controller) recordStep(ctx context.Context, pv *v1.PersistentVolume, s reclaim.State) (*v1.PersistentVolume, error) {
	pv = pv.DeepCopy()
	if pv.Annotations == nil {
		pv.Annotations = map[string]string{}
	}
	delete(pv.Annotations, AnnReclaimStep)
	delete(pv.Annotations, AnnDeleteAfter)
	if s.Step != reclaim.Released {
		pv.Annotations[AnnReclaimStep] = string(s.Step)
	}
	if !s.DeleteAfter.IsZero() {
		pv.Annotations[AnnDeleteAfter] = s.DeleteAfter.UTC().Format(time.RFC3339)
	}
	updated, err := c.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("record reclaim step %q on PersistentVolume %s: %w", s.Step, pv.Name, err)
	}
	return updated, nil
}

// act takes action on pv, whose step s is recorded.
func (c *Controller) act(ctx context.Context, pv *v1.PersistentVolume, s reclaim.State, action reclaim.Action) error {
	log := c.log.With(zap.String("pv", pv.Name))
	opCtx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
	defer cancel()
	switch action {
	case reclaim.MoveAside:
		if err := c.cfg.Provisioner.MoveAside(opCtx, pv); err != nil {
			return fmt.Errorf("move aside the storage of PersistentVolume %s: %w", pv.Name, err)
		}
		c.setMovedAside(pv.Name, true)
		msg := fmt.Sprintf("storage moved aside; deleted after %s unless the reclaim policy is set to Retain first", s.DeleteAfter.UTC().Format(time.RFC3339))
		c.event(pv, v1.EventTypeNormal, ReasonVolumeMovedAside, msg)
		log.Info("released volume moved aside", zap.Time("deleteAfter", s.DeleteAfter))
		c.queue.AddAfter(key{pv: true, name: pv.Name}, max(time.Until(s.DeleteAfter), 0))
	case reclaim.Restore:
		if err := c.cfg.Provisioner.Restore(opCtx, pv); err != nil {
			return fmt.Errorf("restore the storage of PersistentVolume %s: %w", pv.Name, err)
		}
		c.setMovedAside(pv.Name, false)
		if _, err := c.recordStep(ctx, pv, reclaim.State{}); err != nil {
			return err
		}
		c.event(pv, v1.EventTypeNormal, ReasonVolumeRestored, "storage restored from pending deletion")
		log.Info("released volume restored")
	case reclaim.Delete:
		if err := c.cfg.Provisioner.Delete(opCtx, pv); err != nil {
			c.event(pv, v1.EventTypeWarning, ReasonVolumeFailedDelete, err.Error())
			return fmt.Errorf("delete the storage of PersistentVolume %s: %w", pv.Name, err)
		}
		if err := c.deletePV(ctx, pv.Name, pv.UID); err != nil {
			return err
		}
		c.forget(pv.Name)
		c.mu.Lock()
		c.deleted[pv.Name] = pv.UID
		c.mu.Unlock()
		log.Info("released volume deleted", zap.Bool("archived", pv.Annotations[AnnArchiveOnDelete] == "true"))
	}
	return nil
}

// NotifyActual tells the controller that the actual state changed: the PVs
// whose reclaiming waits for a pod's volume to be torn down are looked at
// again at once. It never blocks.
func (c *Controller) NotifyActual() {
	c.mu.Lock()
	names := make([]string, 0, len(c.waiting))
	for name := range c.waiting {
		names = append(names, name)
	}
	c.mu.Unlock()
	for _, name := range names {
		c.queue.Add(key{pv: true, name: name})
	}
}

func (c *Controller) setWaiting(name string, busy bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if busy {
		c.waiting[name] = true
	} else {
		delete(c.waiting, name)
	}
}

func (c *Controller) movedAside(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asided[name]
}

func (c *Controller) setMovedAside(name string, moved bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if moved {
		c.asided[name] = true
	} else {
		delete(c.asided, name)
	}
}

// forget drops what the controller remembers of a PV that is gone.
func (c *Controller) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.asided, name)
	delete(c.waiting, name)
	delete(c.deleted, name)
}

// deletedUID is the UID of the PV name this controller deleted, until the
// cache has seen it go.
func (c *Controller) deletedUID(name string) types.UID {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deleted[name]
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

// Pending is a released PV of this controller on its way to deletion.
type Pending struct {
	PV string
	// Namespace and Name are the claim that released it.
	Namespace, Name string
	State           reclaim.State
}

// Pending lists the released PVs this controller is to delete, with the
// step each is at, from its cache; none before Run has synced it.
func (c *Controller) Pending() []Pending {
	pvs, err := c.pvs.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []Pending
	for _, pv := range pvs {
		s, ok, err := c.reclaimState(pv)
		if !ok || err != nil || keptBack(pv, s) {
			continue
		}
		p := Pending{PV: pv.Name, State: s}
		if ref := pv.Spec.ClaimRef; ref != nil {
			p.Namespace, p.Name = ref.Namespace, ref.Name
		}
		out = append(out, p)
	}
	return out
}
