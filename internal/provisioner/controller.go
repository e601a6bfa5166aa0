package provisioner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

// Defaults of Config.
const (
	defaultOpTimeout = 2 * time.Minute
	defaultWorkers   = 4
	// resync is the safety net of the level-triggered loop: every claim and
	// PV is looked at again this often, even without a change.
	resync = 10 * time.Minute
	// Failed keys are retried after backoffMin, doubling up to backoffMax:
	// a minute at most, so that a claim is served within a minute of the
	// operator fixing what its reason names (quotas off, no room).
	backoffMin = time.Second
	backoffMax = time.Minute
)

// newRateLimiter is the backoff of failed keys.
func newRateLimiter() workqueue.TypedRateLimiter[key] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[key](backoffMin, backoffMax)
}

// Config configures a Controller.
type Config struct {
	// Client talks to the API server. Required.
	Client kubernetes.Interface
	// Provisioner makes and deletes the storage. Required.
	Provisioner Provisioner
	// Node, when set, makes the controller node-local: it serves only
	// claims whose selected-node annotation names Node, and only PVs whose
	// required node affinity names Node as kubernetes.io/hostname. Empty
	// serves every claim and PV of the provisioner (run it under leader
	// election, see RunLeading).
	Node string
	// Logger is required; the controller names it "provisioner".
	Logger *zap.Logger
	// OpTimeout bounds one Provision or Delete call; 2 minutes when zero.
	OpTimeout time.Duration
	// Workers is how many keys are worked on at once; 4 when zero.
	Workers int
	// ReclaimDelay (--reclaim-delay) is how long the storage of a released
	// PV with policy Delete stays aside, restorable, before it is deleted
	// with the PV. Zero: as soon as nothing uses it.
	ReclaimDelay time.Duration
	// InUse reports whether a pod on this node has the named PV set up, or
	// whether that is not known yet; nothing is moved, restored or deleted
	// meanwhile, and NotifyActual looks again. Optional: nil reports
	// nothing in use (for tests).
	InUse func(pv string) bool
	// CSIDriver, when set, says the agent serves this provisioner as the
	// CSI driver of that name too (--csi-endpoint): it must be the
	// provisioner's Name, and one that has a legacy name (LocalName). The
	// CSI driver's external-provisioner then provisions and deletes the
	// volumes of the claims that name it; this controller serves only the
	// claims that name the legacy name (LegacyLocalName) and the in-tree
	// PVs it made, which it keeps out of the external-provisioner's hands
	// (keepFromCSI). Empty: it serves every name of its provisioner.
	CSIDriver string
	// PauseAfterStorage, for fault tests only, waits this long between
	// making the storage and creating the PV (the agent reads it from
	// $VOLUME_AGENT_TEST_PROVISION_PAUSE). Zero in production.
	PauseAfterStorage time.Duration
}

// Controller provisions claims for one Provisioner and deletes the storage
// of its released PVs. Create it with New; Run does the work.
type Controller struct {
	cfg     Config
	name    string
	log     *zap.Logger
	client  kubernetes.Interface
	queue   workqueue.TypedRateLimitingInterface[key]
	claims  corelisters.PersistentVolumeClaimLister
	pvs     corelisters.PersistentVolumeLister
	classes storagelisters.StorageClassLister
	factory informers.SharedInformerFactory

	mu       sync.Mutex
	recorder record.EventRecorder // guarded by mu; set while Run runs
	// asided holds the PVs whose storage a MoveAside put aside since the
	// controller started (after a restart it is run again: a rename at
	// most); waiting holds those whose reclaiming waits for a teardown.
	asided  map[string]bool // guarded by mu
	waiting map[string]bool // guarded by mu
	// deleted holds, by name, the UID of each PV this controller deleted
	// until its cache sees it gone, so that a stale copy is not deleted
	// again.
	deleted map[string]types.UID // guarded by mu
	// created holds, by name, the PVs this controller created that its
	// informer may not show yet: Request.PVs lists them too, so that a
	// claim provisioned a moment later sees them.
	created map[string]*v1.PersistentVolume // guarded by mu
}

// key is one unit of work: a claim (namespace and name) or a PV (name).
type key struct {
	pv              bool
	namespace, name string
}

func (k key) String() string {
	if k.pv {
		return "PersistentVolume " + k.name
	}
	return "PersistentVolumeClaim " + k.namespace + "/" + k.name
}

// New validates cfg and builds the controller; it starts nothing.
func New(cfg Config) (*Controller, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("provisioner: Config.Client is required")
	case cfg.Provisioner == nil:
		return nil, errors.New("provisioner: Config.Provisioner is required")
	case cfg.Logger == nil:
		return nil, errors.New("provisioner: Config.Logger is required")
	case cfg.ReclaimDelay < 0:
		return nil, errors.New("provisioner: Config.ReclaimDelay is negative")
	case cfg.CSIDriver != "" && (cfg.CSIDriver != cfg.Provisioner.Name() || legacyName(cfg.CSIDriver) == ""):
		return nil, fmt.Errorf("provisioner: Config.CSIDriver %q: only the %s provisioner has a CSI driver", cfg.CSIDriver, LocalName)
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = defaultOpTimeout
	}
	if cfg.Workers <= 0 {
		cfg.Workers = defaultWorkers
	}
	c := &Controller{
		cfg:    cfg,
		name:   cfg.Provisioner.Name(),
		client: cfg.Client,
		log:    cfg.Logger.Named("provisioner").With(zap.String("provisioner", cfg.Provisioner.Name())),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			newRateLimiter(),
			workqueue.TypedRateLimitingQueueConfig[key]{Name: "provisioner " + cfg.Provisioner.Name()}),
		factory: informers.NewSharedInformerFactory(cfg.Client, resync),
		asided:  map[string]bool{},
		waiting: map[string]bool{},
		deleted: map[string]types.UID{},
	}
	c.claims = c.factory.Core().V1().PersistentVolumeClaims().Lister()
	c.pvs = c.factory.Core().V1().PersistentVolumes().Lister()
	c.classes = c.factory.Storage().V1().StorageClasses().Lister()
	c.handle(c.factory.Core().V1().PersistentVolumeClaims().Informer(), false)
	c.handle(c.factory.Core().V1().PersistentVolumes().Informer(), true)
	// A class that appears late (or is fixed) wakes the claims that wait for it.
	c.onAny(c.factory.Storage().V1().StorageClasses().Informer(), func(any) { c.enqueueAllClaims() })
	return c, nil
}

// handle enqueues the key of every added, updated or deleted object, and
// for a claim that of its PV.
func (c *Controller) handle(inf cache.SharedIndexInformer, pv bool) {
	c.onAny(inf, func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		switch o := obj.(type) {
		case *v1.PersistentVolumeClaim:
			c.queue.Add(key{namespace: o.Namespace, name: o.Name})
			if o.Spec.VolumeName != "" {
				// A released PV is reclaimed only once this cache shows
				// its claim gone (claimGoneCached), and the claims' watch
				// may deliver the deletion after the PVs' watch delivered
				// the release: the PV is looked at again then.
				c.queue.Add(key{pv: true, name: o.Spec.VolumeName})
			}
		case *v1.PersistentVolume:
			c.forgetCreated(o.Name) // the informer shows it, or its deletion
			c.queue.Add(key{pv: true, name: o.Name})
		}
	})
}

// noteCreated records pv, just created, until the informer shows it.
func (c *Controller) noteCreated(pv *v1.PersistentVolume) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.created == nil {
		c.created = map[string]*v1.PersistentVolume{}
	}
	c.created[pv.Name] = pv
}

func (c *Controller) forgetCreated(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.created, name)
}

// existingPVs lists the PVs the informer shows and those this controller
// created that it does not show yet (Request.PVs).
func (c *Controller) existingPVs() []*v1.PersistentVolume {
	pvs, _ := c.pvs.List(labels.Everything())
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, pv := range c.created {
		if _, err := c.pvs.Get(name); err != nil {
			pvs = append(pvs, pv)
		}
	}
	return pvs
}

func (c *Controller) onAny(inf cache.SharedIndexInformer, f func(any)) {
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    f,
		UpdateFunc: func(_, obj any) { f(obj) },
		DeleteFunc: f,
	})
}

func (c *Controller) enqueueAllClaims() {
	claims, _ := c.claims.List(labels.Everything())
	for _, cl := range claims {
		c.queue.Add(key{namespace: cl.Namespace, name: cl.Name})
	}
}

// Run watches claims, PVs and classes, and works on them until ctx ends;
// it joins every goroutine it started before it returns.
func (c *Controller) Run(ctx context.Context) error {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events("")})
	c.mu.Lock()
	c.recorder = b.NewRecorder(scheme.Scheme, v1.EventSource{Component: c.name, Host: c.cfg.Node})
	c.mu.Unlock()
	defer b.Shutdown()

	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	defer c.queue.ShutDown()
	synced := c.factory.WaitForCacheSync(ctx.Done())
	for typ, ok := range synced {
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("provisioner %s: %v informer did not sync", c.name, typ)
		}
	}
	c.log.Info("provisioner started", zap.String("node", c.cfg.Node))
	var wg sync.WaitGroup
	if r, ok := c.cfg.Provisioner.(Resumer); ok {
		c.settleLeftovers(ctx, r) // before any worker provisions again
		wg.Go(func() {
			t := time.NewTicker(resync)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					c.settleLeftovers(ctx, r)
				}
			}
		})
	}
	for range c.cfg.Workers {
		wg.Go(func() {
			for c.work(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// work handles one key; it returns false once the queue is shut down.
func (c *Controller) work(ctx context.Context) bool {
	k, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(k)
	var err error
	if k.pv {
		err = c.syncPV(ctx, k.name)
	} else {
		err = c.syncClaim(ctx, k.namespace, k.name)
	}
	switch {
	case err == nil:
		c.queue.Forget(k)
	case ctx.Err() != nil:
	default:
		c.log.Info("will retry", zap.Stringer("object", k), zap.Int("failures", c.queue.NumRequeues(k)+1), zap.Error(err))
		c.queue.AddRateLimited(k)
	}
	return true
}

// event records an event on obj while Run runs.
func (c *Controller) event(obj runtime.Object, typ, reason, msg string) {
	c.mu.Lock()
	r := c.recorder
	c.mu.Unlock()
	if r != nil {
		r.Event(obj, typ, reason, msg)
	}
}
