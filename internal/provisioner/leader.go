package provisioner

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Leader election timing, as client-go's and the external provisioners'
// defaults: a leader that dies is replaced within LeaseDuration plus one
// RetryPeriod.
const (
	LeaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// Election configures RunLeading.
type Election struct {
	Client kubernetes.Interface
	// Namespace holds the Lease.
	Namespace string
	// Identity names this candidate (the node's name).
	Identity string
	Logger   *zap.Logger
}

// LeaseName is the name of the Lease of provisioner p: its name with every
// character a Lease name may not hold ('/') replaced by '-'.
func LeaseName(p string) string { return strings.ReplaceAll(p, "/", "-") }

// RunLeading runs run while this agent holds the Lease of provisioner
// name, and stands for election again whenever it loses it, until ctx
// ends. run's context ends when the lease is lost; it must return then. A
// run that fails ends RunLeading with its error. The Lease is released when
// ctx ends, so another agent takes over at once after a clean shutdown.
// Both goroutines it starts are joined before it returns.
func RunLeading(ctx context.Context, e Election, name string, run func(context.Context) error) error {
	log := e.Logger.Named("leader").With(zap.String("lease", e.Namespace+"/"+LeaseName(name)))
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: LeaseName(name)},
		Client:     e.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity},
	}
	// The elector calls OnStartedLeading on a goroutine it never joins, so
	// the callback only hands the term's context over; run runs here.
	terms := make(chan context.Context, 1)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: LeaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		ReleaseOnCancel: true, Name: name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(term context.Context) {
				select {
				case terms <- term:
				case <-term.Done(): // lost, or ctx ended, before run took it
				}
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election for %s: %w", name, err)
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		for ctx.Err() == nil {
			le.Run(ctx) // returns when the lease is lost or ctx ends
		}
		return nil
	})
	g.Go(func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case term := <-terms:
				log.Info("leading")
				if err := run(term); err != nil {
					return err
				}
				log.Info("not leading")
			}
		}
	})
	return g.Wait()
}
