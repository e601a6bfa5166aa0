package storagecapacity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/volume-agent/volume-agent/internal/provisioner"
)

// Labels of the CSIStorageCapacity objects a Publisher makes.
const (
	// LabelNode holds a hash of the node's name (a node name may be too
	// long for a label value); the objects of one node share it.
	LabelNode = "capacity.volume-agent.io/node"
	// LabelManagedBy is app.kubernetes.io/managed-by: "volume-agent".
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "volume-agent"
)

const (
	// refresh is how often room is measured without a change of this
	// agent's volumes: for what other writers take of the file system.
	refresh = time.Minute
	// retryMin is the first wait after a failed round; it doubles up to
	// refresh.
	retryMin = time.Second
	// resync is the informers' resync period.
	resync = 10 * time.Minute
)

// Config configures a Publisher. Every field is required.
type Config struct {
	Client kubernetes.Interface
	// Driver is the provisioner's name (provisioner.LocalName): the
	// CSIDriver object's, and what the classes served name.
	Driver string
	// Node is this node's name, also its kubernetes.io/hostname label, as
	// the provisioner's PVs assume.
	Node string
	// Namespace holds the CSIStorageCapacity objects.
	Namespace string
	// Room measures how many bytes a new volume can still be given.
	Room   func(context.Context) (int64, error)
	Logger *zap.Logger
}

// Publisher keeps this node's CSIStorageCapacity objects current. Create
// it with New; Run does the work.
type Publisher struct {
	cfg  Config
	log  *zap.Logger
	kick chan struct{}
	// owner is the Node as an owner reference, once read.
	owner *metav1.OwnerReference
	// ownerRefused: the Node cannot be read (RBAC); asked no more.
	ownerRefused bool
	// driverChecked: checkDriver found, made, or may not read the
	// CSIDriver object.
	driverChecked bool
}

// New checks cfg.
func New(cfg Config) (*Publisher, error) {
	if cfg.Client == nil || cfg.Driver == "" || cfg.Node == "" || cfg.Namespace == "" || cfg.Room == nil || cfg.Logger == nil {
		return nil, errors.New("storagecapacity: Client, Driver, Node, Namespace, Room and Logger are required")
	}
	return &Publisher{cfg: cfg, log: cfg.Logger.Named("storage-capacity"), kick: make(chan struct{}, 1)}, nil
}

// Changed says that the room may have changed (a volume was made, grown
// or deleted). It never blocks.
func (p *Publisher) Changed() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run publishes until ctx ends.
func (p *Publisher) Run(ctx context.Context) error {
	classes := informers.NewSharedInformerFactory(p.cfg.Client, resync)
	mine := informers.NewSharedInformerFactoryWithOptions(p.cfg.Client, resync, informers.WithNamespace(p.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelNode + "=" + nodeKey(p.cfg.Node) }))
	classLister := classes.Storage().V1().StorageClasses().Lister()
	capLister := mine.Storage().V1().CSIStorageCapacities().Lister()
	wake := cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { p.Changed() }, UpdateFunc: func(any, any) { p.Changed() }, DeleteFunc: func(any) { p.Changed() },
	}
	for _, inf := range []cache.SharedIndexInformer{classes.Storage().V1().StorageClasses().Informer(), mine.Storage().V1().CSIStorageCapacities().Informer()} {
		if _, err := inf.AddEventHandler(wake); err != nil {
			return fmt.Errorf("storage capacity: %w", err)
		}
	}
	classes.Start(ctx.Done())
	mine.Start(ctx.Done())
	defer classes.Shutdown()
	defer mine.Shutdown()
	// A list the API server refuses (RBAC) is retried until it is
	// allowed, or until the agent stops: that is no error of the agent's.
	for _, synced := range []map[reflect.Type]bool{classes.WaitForCacheSync(ctx.Done()), mine.WaitForCacheSync(ctx.Done())} {
		for typ, ok := range synced {
			if !ok && ctx.Err() == nil {
				return fmt.Errorf("storage capacity: %v informer did not sync", typ)
			}
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	wait := refresh
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.kick:
		case <-timer.C:
		}
		if err := p.sync(ctx, classLister, capLister); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			wait = min(max(retryMin, wait*2), refresh)
			if wait == refresh || wait == 2*retryMin {
				p.log.Warn("CSIStorageCapacity objects not current; retrying", zap.Duration("in", wait), zap.Error(err))
			}
		} else {
			wait = refresh
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// sync makes this node's objects match the classes and the room.
func (p *Publisher) sync(ctx context.Context, classLister storagelisters.StorageClassLister, capLister storagelisters.CSIStorageCapacityLister) error {
	if !p.driverChecked {
		p.driverChecked = p.checkDriver(ctx)
	}
	room, err := p.cfg.Room(ctx)
	if err != nil {
		return fmt.Errorf("measure the room: %w", err)
	}
	classes, err := classLister.List(labels.Everything())
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, c := range classes {
		if provisioner.Canonical(c.Provisioner) == p.cfg.Driver {
			want[c.Name] = true
		}
	}
	have, err := capLister.CSIStorageCapacities(p.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return err
	}
	p.readOwner(ctx)
	api := p.cfg.Client.StorageV1().CSIStorageCapacities(p.cfg.Namespace)
	var errs []error
	seen := map[string]bool{}
	for _, o := range have {
		switch {
		case !want[o.StorageClassName] || o.Name != objectName(p.cfg.Node, o.StorageClassName):
			// Its class is gone or no longer the provisioner's (or it is
			// not one this node makes).
			err := api.Delete(ctx, o.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &o.UID}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs = append(errs, fmt.Errorf("delete CSIStorageCapacity %s/%s: %w", o.Namespace, o.Name, err))
			} else {
				p.log.Info("CSIStorageCapacity deleted: its class is not served", zap.String("name", o.Name), zap.String("class", o.StorageClassName))
			}
		case worthUpdating(o, room) || (p.owner != nil && len(o.OwnerReferences) == 0):
			seen[o.StorageClassName] = true
			u := o.DeepCopy()
			setRoom(u, room)
			if p.owner != nil {
				u.OwnerReferences = []metav1.OwnerReference{*p.owner}
			}
			if _, err := api.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
				errs = append(errs, fmt.Errorf("update CSIStorageCapacity %s/%s: %w", o.Namespace, o.Name, err))
			} else {
				p.log.Debug("CSIStorageCapacity updated", zap.String("class", o.StorageClassName), zap.Int64("bytes", room))
			}
		default:
			seen[o.StorageClassName] = true
		}
	}
	for class := range want {
		if seen[class] {
			continue
		}
		o := p.object(class, room)
		_, err := api.Create(ctx, o, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
			// Made before the informer showed it: its event comes.
		case err != nil:
			errs = append(errs, fmt.Errorf("create CSIStorageCapacity %s/%s for StorageClass %s: %w", p.cfg.Namespace, o.Name, class, err))
		default:
			p.log.Info("CSIStorageCapacity created", zap.String("name", o.Name), zap.String("class", class), zap.Int64("bytes", room))
		}
	}
	return errors.Join(errs...)
}

// object is the CSIStorageCapacity of class for room bytes.
func (p *Publisher) object(class string, room int64) *storagev1.CSIStorageCapacity {
	o := &storagev1.CSIStorageCapacity{
		ObjectMeta: metav1.ObjectMeta{
			Name:      objectName(p.cfg.Node, class),
			Namespace: p.cfg.Namespace,
			Labels:    map[string]string{LabelNode: nodeKey(p.cfg.Node), LabelManagedBy: managedBy},
		},
		NodeTopology:     &metav1.LabelSelector{MatchLabels: map[string]string{v1.LabelHostname: p.cfg.Node}},
		StorageClassName: class,
	}
	if p.owner != nil {
		o.OwnerReferences = []metav1.OwnerReference{*p.owner}
	}
	setRoom(o, room)
	return o
}

// setRoom gives o room bytes as capacity and as maximumVolumeSize: the
// volumes share one file system, so the largest one can take it all.
func setRoom(o *storagev1.CSIStorageCapacity, room int64) {
	o.Capacity = resource.NewQuantity(room, resource.BinarySI)
	o.MaximumVolumeSize = resource.NewQuantity(room, resource.BinarySI)
}

// worthUpdating reports whether o's capacity is far enough from room to
// send: by 1 MiB at least, 64 MiB at most, and 1 % between; any change to
// or from zero.
func worthUpdating(o *storagev1.CSIStorageCapacity, room int64) bool {
	if o.Capacity == nil || o.MaximumVolumeSize == nil || o.MaximumVolumeSize.Value() != o.Capacity.Value() {
		return true
	}
	old := o.Capacity.Value()
	if (old == 0) != (room == 0) {
		return true
	}
	d := old - room
	if d < 0 {
		d = -d
	}
	return d >= min(64<<20, max(1<<20, old/100))
}

// readOwner reads the Node for the owner reference, until it has it or
// is refused.
func (p *Publisher) readOwner(ctx context.Context) {
	if p.owner != nil || p.ownerRefused {
		return
	}
	n, err := p.cfg.Client.CoreV1().Nodes().Get(ctx, p.cfg.Node, metav1.GetOptions{})
	switch {
	case apierrors.IsForbidden(err):
		p.ownerRefused = true
		p.log.Warn("the Node cannot be read: CSIStorageCapacity objects get no owner, and outlive the Node", zap.String("node", p.cfg.Node), zap.Error(err))
	case err != nil:
		p.log.Debug("the Node cannot be read yet", zap.String("node", p.cfg.Node), zap.Error(err))
	default:
		p.owner = &metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}
	}
}

// checkDriver makes sure the CSIDriver object of the provisioner exists
// with storageCapacity: true, or says why the scheduler will not look at
// the objects. It reports false when the answer may change by asking
// again (the API server did not answer).
func (p *Publisher) checkDriver(ctx context.Context) bool {
	api := p.cfg.Client.StorageV1().CSIDrivers()
	d, err := api.Get(ctx, p.cfg.Driver, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		d, err = api.Create(ctx, Driver(p.cfg.Driver), metav1.CreateOptions{})
		if err == nil {
			p.log.Info("CSIDriver created, so that the scheduler reads the CSIStorageCapacity objects", zap.String("name", p.cfg.Driver))
		}
		if apierrors.IsAlreadyExists(err) {
			d, err = api.Get(ctx, p.cfg.Driver, metav1.GetOptions{})
		}
	}
	switch {
	case err != nil && !apierrors.IsForbidden(err):
		p.log.Debug("the CSIDriver object of the provisioner cannot be read yet", zap.String("name", p.cfg.Driver), zap.Error(err))
		return false
	case err != nil:
		p.log.Warn("the CSIDriver object of the provisioner cannot be read or made: the scheduler does not consider room unless it exists with storageCapacity: true "+
			"(deploy/daemonset.yaml and the Helm chart create it)", zap.String("name", p.cfg.Driver), zap.Error(err))
	case d.Spec.StorageCapacity == nil || !*d.Spec.StorageCapacity:
		p.log.Warn("the CSIDriver object of the provisioner does not say storageCapacity: true: the scheduler does not consider room",
			zap.String("name", p.cfg.Driver))
	}
	return true
}

// Driver is the CSIDriver object for the provisioner name, as the chart
// and deploy/ ship it (deploy/chart's TestCSIDriver holds them equal): no
// attach, the pod's information at publish, the kubelet applying fsGroup
// itself (File: the driver binds a directory and takes no gid option), no
// SELinux context mount (a bind mount takes none), persistent volumes only,
// and storageCapacity: true, which makes the scheduler read the
// CSIStorageCapacity objects. With the CSI endpoint off, only that last
// field is used: the provisioner's PVs are then local volumes, which no
// component handles as CSI.
func Driver(name string) *storagev1.CSIDriver {
	return &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelManagedBy: managedBy}},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired:       ptr.To(false),
			PodInfoOnMount:       ptr.To(true),
			FSGroupPolicy:        ptr.To(storagev1.FileFSGroupPolicy),
			StorageCapacity:      ptr.To(true),
			SELinuxMount:         ptr.To(false),
			RequiresRepublish:    ptr.To(false),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
		},
	}
}

// nodeKey is the LabelNode value of node: a label value holds at most 63
// characters, a node name up to 253.
func nodeKey(node string) string {
	sum := sha256.Sum256([]byte(node))
	return hex.EncodeToString(sum[:8])
}

// objectName is the name of the object of node and class: the same after
// a restart, and distinct for every node and class.
func objectName(node, class string) string {
	sum := sha256.Sum256([]byte(node + "\x00" + class))
	return "local-" + hex.EncodeToString(sum[:12])
}
