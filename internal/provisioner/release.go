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

	"github.com/volume-agent/volume-agent/internal/evidence"
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
	// AnnReleasedBy is the UID of the claim that released the PV,
	// recorded with the first step: storage aside is given back only
	// while the PV is bound to that claim.
	AnnReleasedBy = "volume-agent.io/released-by-uid"
	// AnnReclaimRefused says why the recorded step is not acted on: the
	// PV's live state does not permit it (evidence.Step).
	AnnReclaimRefused = "volume-agent.io/reclaim-refused"
)

// Event reasons on PVs.
const (
	ReasonVolumeFailedDelete = "VolumeFailedDelete"
	ReasonVolumeMovedAside   = "VolumeMovedAside"
	ReasonVolumeRestored     = "VolumeRestored"
	// ReasonVolumeReclaimRefused: a recorded step is not acted on.
	ReasonVolumeReclaimRefused = "VolumeReclaimRefused"
)

// syncPV takes the storage of a released PV this controller serves one
// step further (reclaim.Next): moved aside once no pod on this node has it
// set up, deleted with the PV once the reclaim delay has passed, or
// restored when an operator set the reclaim policy to Retain while it was
// aside. Each step is recorded on the PV before it is taken, and a
// recorded step is acted on only as far as the PV's live state permits
// (evidence.Step); otherwise it is refused, and the PV says why.
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
	if changed, err := c.keepFromCSI(ctx, pv); changed || err != nil {
		return err // the update enqueues the PV again
	}
	state, ok, err := c.reclaimState(pv)
	if !ok || err != nil {
		if err == nil && state.Step == reclaim.Released && pv.Annotations[AnnReclaimRefused] != "" && c.serves(pv) {
			err = c.clearRefusal(ctx, pv) // the step refused was removed
		}
		return err
	}
	verdict := evidence.Step(state.Step, live(pv, c.claimGoneCached(pv)))
	if verdict.Use == evidence.Refuse {
		c.setWaiting(name, false)
		return c.refuse(ctx, pv, state, verdict.Why)
	}
	// Waiting before InUse is read: a teardown that ends after the read
	// finds the PV waiting, and its NotifyActual brings it back here.
	c.setWaiting(name, true)
	busy := c.cfg.InUse != nil && c.cfg.InUse(pv.Name)
	c.setWaiting(name, busy)
	next, action := reclaim.Next(state, reclaim.Facts{Now: time.Now(), Delay: c.cfg.ReclaimDelay,
		Wanted: verdict.Use == evidence.GiveBack, InUse: busy, MovedAside: c.movedAside(name)})
	if next != state || pv.Annotations[AnnReclaimRefused] != "" || (next.Step != reclaim.Released && pv.Annotations[AnnReleasedBy] == "") {
		if pv, ok, err = c.record(ctx, pv, state, next); !ok || err != nil {
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
// or with a step recorded, which evidence.Step then checks against the
// PV's live state. An unknown or damaged record is an error: nothing is
// done on a guess.
func (c *Controller) reclaimState(pv *v1.PersistentVolume) (reclaim.State, bool, error) {
	if !c.serves(pv) {
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

// serves reports whether pv is this controller's: provisioned by it, on
// this node when it is node-local, not being deleted, and not a CSI PV.
// The CSI driver's PVs carry the same provisioned-by (the external-
// provisioner writes the driver's name) but are deleted through the
// driver's DeleteVolume, never here.
func (c *Controller) serves(pv *v1.PersistentVolume) bool {
	return Canonical(pv.Annotations[AnnProvisionedBy]) == c.name && pv.DeletionTimestamp == nil && pv.Spec.CSI == nil &&
		(c.cfg.Node == "" || OnNode(pv, c.cfg.Node))
}

// record writes next on pv, whose recorded state is s, and returns the PV
// as written. The first step also records the claim that released the PV
// (and so does any step of a PV recorded without it, by an older agent),
// once the API server, not the cache, has confirmed that the PV is
// Released with policy Delete: ok is false, and nothing is written, when
// it is not.
func (c *Controller) record(ctx context.Context, pv *v1.PersistentVolume, s, next reclaim.State) (*v1.PersistentVolume, bool, error) {
	if next.Step != reclaim.Released && pv.Annotations[AnnReleasedBy] == "" {
		var ok bool
		var err error
		if pv, ok, err = c.confirmed(ctx, pv, s, evidence.Reclaim); !ok || err != nil {
			return nil, false, err
		}
	}
	pv, err := c.recordStep(ctx, pv, next)
	return pv, err == nil, err
}

// recordStep writes step s on pv (no annotations for reclaim.Released),
// with the claim that released pv when none is recorded yet, and returns
// the PV as written. A conflict is an error: the key is retried with the
// PV as it is now.
func (c *Controller) recordStep(ctx context.Context, pv *v1.PersistentVolume, s reclaim.State) (*v1.PersistentVolume, error) {
	pv = pv.DeepCopy()
	if pv.Annotations == nil {
		pv.Annotations = map[string]string{}
	}
	delete(pv.Annotations, AnnReclaimStep)
	delete(pv.Annotations, AnnDeleteAfter)
	delete(pv.Annotations, AnnReclaimRefused)
	switch {
	case s.Step == reclaim.Released:
		delete(pv.Annotations, AnnReleasedBy)
	case pv.Annotations[AnnReleasedBy] == "" && pv.Spec.ClaimRef != nil:
		pv.Annotations[AnnReleasedBy] = string(pv.Spec.ClaimRef.UID)
	}
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
		msg := fmt.Sprintf("storage set aside; deleted after %s unless the reclaim policy is set to Retain first", s.DeleteAfter.UTC().Format(time.RFC3339))
		c.event(pv, v1.EventTypeNormal, ReasonVolumeMovedAside, msg)
		log.Info("released volume set aside", zap.Time("deleteAfter", s.DeleteAfter))
		c.queue.AddAfter(key{pv: true, name: pv.Name}, max(time.Until(s.DeleteAfter), 0))
	case reclaim.Restore:
		pv, ok, err := c.confirmed(ctx, pv, s, evidence.GiveBack)
		if !ok || err != nil {
			return err
		}
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
		pv, ok, err := c.confirmed(ctx, pv, s, evidence.Reclaim)
		if !ok || err != nil {
			return err
		}
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
		if !ok || err != nil || evidence.Step(s.Step, live(pv, c.claimGoneCached(pv))).Use != evidence.Reclaim {
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
