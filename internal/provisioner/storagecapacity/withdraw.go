package storagecapacity

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Withdrawal deletes the CSIStorageCapacity objects a Publisher made for
// this node in an earlier run, once the agent serves the CSI driver and
// the driver's external-provisioner publishes the node's room from
// GetCapacity instead. Left in place they would keep their last figure:
// the scheduler takes any one object of a class and node with room enough
// as a yes, so a stale one would place pods on a node that is full. Only
// objects carrying both the node's and the agent's labels are deleted,
// never the external-provisioner's.
type Withdrawal struct {
	cfg Config
	log *zap.Logger
}

// NewWithdrawal checks cfg: Client, Node, Namespace and Logger are
// required, Driver and Room unused.
func NewWithdrawal(cfg Config) (*Withdrawal, error) {
	if cfg.Client == nil || cfg.Node == "" || cfg.Namespace == "" || cfg.Logger == nil {
		return nil, errors.New("storagecapacity: Client, Node, Namespace and Logger are required")
	}
	return &Withdrawal{cfg: cfg, log: cfg.Logger.Named("storage-capacity")}, nil
}

// Run deletes the objects, retrying a failed round after 1 s, doubling to
// a minute, and returns once a round found or left none (or ctx ended).
func (w *Withdrawal) Run(ctx context.Context) error {
	wait := retryMin
	for {
		n, err := w.round(ctx)
		switch {
		case err == nil:
			if n > 0 {
				w.log.Info("CSIStorageCapacity objects of an earlier run deleted: the CSI driver's external-provisioner publishes the room",
					zap.Int("objects", n))
			}
			return nil
		case ctx.Err() != nil:
			return nil
		}
		if wait == retryMin || wait == refresh {
			w.log.Warn("CSIStorageCapacity objects of an earlier run not deleted; retrying", zap.Duration("in", wait), zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(wait*2, refresh)
	}
}

// round deletes every object of this node a Publisher made, each only
// while its UID is the one listed; it returns how many it deleted.
func (w *Withdrawal) round(ctx context.Context) (int, error) {
	api := w.cfg.Client.StorageV1().CSIStorageCapacities(w.cfg.Namespace)
	sel := labels.SelectorFromSet(labels.Set{LabelNode: nodeKey(w.cfg.Node), LabelManagedBy: managedBy}).String()
	list, err := api.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return 0, fmt.Errorf("list CSIStorageCapacity objects %s in %s: %w", sel, w.cfg.Namespace, err)
	}
	n := 0
	var errs []error
	for _, o := range list.Items {
		err := api.Delete(ctx, o.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &o.UID}})
		switch {
		case err == nil:
			n++
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		default:
			errs = append(errs, fmt.Errorf("delete CSIStorageCapacity %s/%s: %w", o.Namespace, o.Name, err))
		}
	}
	return n, errors.Join(errs...)
}
