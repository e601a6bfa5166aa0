package apiserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Name is the source's name in logs and the status API.
const Name = "api"

// Config configures a Source.
type Config struct {
	Client   kubernetes.Interface
	NodeName string
	Logger   *zap.Logger
	// OnChange is called (from informer goroutines; it must not block)
	// whenever a pod, the node or a referenced object changed, a watch
	// synced, or a watch failed anew.
	OnChange func()
	// Reads makes the one direct read (GET) of each ConfigMap and Secret
	// when a pod first refers to it, so that lookups need not wait for
	// the object's watch to list (see reader). Its requests should not
	// wait for a client-side rate limiter: ReadTokens decides instead
	// whether a read is made. Defaults to Client.
	Reads kubernetes.Interface
	// ReadTokens, when set, is asked for a token before each direct read;
	// without one the read is skipped and lookups wait for the watch.
	ReadTokens Tokens
}

// Source serves the pods of this node from the API server.
type Source struct {
	cfg        Config
	log        *zap.Logger
	pods       cache.SharedIndexInformer
	node       cache.SharedIndexInformer
	podErrs    *failures
	nodeErrs   *failures
	podsReach  *reachability // the API server as the pod informer's calls see it
	nodeReach  *reachability // the same for the Node informer
	pvs        *lazyInformer
	pvcs       *lazyInformer
	configMaps *objects
	secrets    *objects
	references *referenceTracker // of configMaps and secrets
	runner     *runner
}

var _ source.Source = (*Source)(nil)

// New builds the informers; it starts nothing.
func New(cfg Config) (*Source, error) {
	if cfg.Client == nil || cfg.NodeName == "" || cfg.Logger == nil {
		return nil, errors.New("apiserver source: Client, NodeName and Logger are required")
	}
	if cfg.OnChange == nil {
		cfg.OnChange = func() {}
	}
	log := cfg.Logger.Named("api")
	c, core := cfg.Client, cfg.Client.CoreV1()
	s := &Source{cfg: cfg, log: log, runner: &runner{}, podsReach: &reachability{}, nodeReach: &reachability{}}
	s.podErrs, s.nodeErrs = newFailures(cfg.OnChange), newFailures(cfg.OnChange)
	s.pods = informer(listWatch[*v1.PodList](plainLists{c}, core.Pods(""), fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName), s.podErrs, s.podsReach), &v1.Pod{})
	s.node = informer(listWatch[*v1.NodeList](plainLists{c}, core.Nodes(), byName(cfg.NodeName), s.nodeErrs, s.nodeReach), &v1.Node{})
	s.podErrs.install(s.pods)
	s.nodeErrs.install(s.node)
	reads := cfg.Client.CoreV1()
	if cfg.Reads != nil {
		reads = cfg.Reads.CoreV1()
	}
	s.pvs = &lazyInformer{kind: "persistentVolume", runner: s.runner, onChange: cfg.OnChange, log: log, build: func(o observer) cache.SharedIndexInformer {
		return informer(listWatch[*v1.PersistentVolumeList](c, core.PersistentVolumes(), fields.Everything(), o), &v1.PersistentVolume{})
	}, byGet: s.polledOf("persistentVolume", func(ctx context.Context, r ref) (runtime.Object, error) {
		return getObject(core.PersistentVolumes().Get(ctx, r.name, metav1.GetOptions{}))
	})}
	s.pvcs = &lazyInformer{kind: "persistentVolumeClaim", runner: s.runner, onChange: cfg.OnChange, log: log, build: func(o observer) cache.SharedIndexInformer {
		return informer(listWatch[*v1.PersistentVolumeClaimList](c, core.PersistentVolumeClaims(""), fields.Everything(), o), &v1.PersistentVolumeClaim{})
	}, byGet: s.polledOf("persistentVolumeClaim", func(ctx context.Context, r ref) (runtime.Object, error) {
		return getObject(core.PersistentVolumeClaims(r.namespace).Get(ctx, r.name, metav1.GetOptions{}))
	})}
	s.configMaps = s.objectsOf("configmaps", &v1.ConfigMap{}, func(r ref, o observer) cache.ListerWatcher {
		return listWatch[*v1.ConfigMapList](c, core.ConfigMaps(r.namespace), byName(r.name), o)
	}, func(ctx context.Context, r ref) (runtime.Object, error) {
		return getObject(reads.ConfigMaps(r.namespace).Get(ctx, r.name, metav1.GetOptions{}))
	})
	s.secrets = s.objectsOf("secrets", &v1.Secret{}, func(r ref, o observer) cache.ListerWatcher {
		return listWatch[*v1.SecretList](c, core.Secrets(r.namespace), byName(r.name), o)
	}, func(ctx context.Context, r ref) (runtime.Object, error) {
		return getObject(reads.Secrets(r.namespace).Get(ctx, r.name, metav1.GetOptions{}))
	})
	if _, err := s.node.AddEventHandler(notifyHandler(cfg.OnChange)); err != nil {
		return nil, err
	}
	s.references = &referenceTracker{configMaps: s.configMaps, secrets: s.secrets}
	if _, err := s.pods.AddEventHandler(podHandler(s.podChanged)); err != nil {
		return nil, err
	}
	return s, nil
}

// objectsOf builds the per-object watches and direct reads of one
// resource: lw lists and watches one object, get reads it.
func (s *Source) objectsOf(resource string, example runtime.Object, lw func(ref, observer) cache.ListerWatcher, get func(context.Context, ref) (runtime.Object, error)) *objects {
	return &objects{resource: resource, example: example, listWatch: lw, runner: s.runner, log: s.log, onChange: s.cfg.OnChange,
		reader: &reader{resource: resource, get: get, tokens: s.cfg.ReadTokens, log: s.log}}
}

// polledOf reads objects of one kind one at a time (see polled).
func (s *Source) polledOf(kind string, get func(context.Context, ref) (runtime.Object, error)) *polled {
	return &polled{kind: kind, get: get, runner: s.runner, onChange: s.cfg.OnChange, now: time.Now}
}

func informer(lw cache.ListerWatcher, obj runtime.Object) cache.SharedIndexInformer {
	return cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
}

func byName(name string) fields.Selector { return fields.OneTermEqualSelector("metadata.name", name) }

// notifyHandler calls fn on every add, update and delete.
func notifyHandler(fn func()) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { fn() },
		UpdateFunc: func(any, any) { fn() },
		DeleteFunc: func(any) { fn() },
	}
}

// podHandler calls fn with the pod of every add, update and delete (for a
// delete, possibly a tombstone).
func podHandler(fn func(any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { fn(obj) },
		UpdateFunc: func(_, obj any) { fn(obj) },
		DeleteFunc: func(obj any) { fn(obj) },
	}
}

// Name implements source.Source.
func (s *Source) Name() string { return Name }

// Run runs the informers until ctx ends and joins them.
func (s *Source) Run(ctx context.Context) error {
	s.runner.start(ctx)
	for _, inf := range []cache.SharedIndexInformer{s.pods, s.node} {
		s.runner.run(ctx, inf.RunWithContext)
	}
	// An empty first list sends no event; say once that the source synced,
	// so that what it no longer lists is acted on at once.
	s.runner.run(ctx, whenSynced(s.cfg.OnChange, s.pods, s.node))
	s.log.Info("watching the API server", zap.String("node", s.cfg.NodeName))
	<-ctx.Done()
	s.runner.wait()
	return nil
}

// podChanged brings the watched ConfigMaps and Secrets up to date with the
// one pod an event is about, as the store now holds it (the store is level:
// whatever the event said, the store's object is the latest).
func (s *Source) podChanged(obj any) {
	if key, ok := podEventKey(obj); ok {
		var refs podRefs
		if item, exists, err := s.pods.GetStore().GetByKey(key); err == nil && exists {
			if p, ok := item.(*v1.Pod); ok && p.Spec.NodeName == s.cfg.NodeName {
				refs = referencesOf(p)
			}
		}
		s.references.set(key, refs)
	}
	s.cfg.OnChange()
}

// Pods returns the pods bound to this node, sorted by namespace and name.
func (s *Source) Pods() []*v1.Pod {
	items := s.pods.GetStore().List()
	pods := make([]*v1.Pod, 0, len(items))
	for _, it := range items {
		if p, ok := it.(*v1.Pod); ok && p.Spec.NodeName == s.cfg.NodeName {
			pods = append(pods, p)
		}
	}
	slices.SortFunc(pods, func(a, b *v1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return pods
}

// Objects implements source.Source.
func (s *Source) Objects() volume.Objects { return lookups{s} }

// Node returns this node's object once seen.
func (s *Source) Node() *v1.Node {
	obj, ok, err := s.node.GetStore().GetByKey(s.cfg.NodeName)
	if err != nil || !ok {
		return nil
	}
	n, _ := obj.(*v1.Node)
	return n
}

// PersistentVolume returns a PV from an informer started on first use.
func (s *Source) PersistentVolume(name string) (*v1.PersistentVolume, error) {
	return lazyGet[*v1.PersistentVolume](s.pvs, "", name)
}

// PersistentVolumeClaim returns a PVC from an informer started on first use.
func (s *Source) PersistentVolumeClaim(namespace, name string) (*v1.PersistentVolumeClaim, error) {
	return lazyGet[*v1.PersistentVolumeClaim](s.pvcs, namespace, name)
}

// get looks an object up in an informer's store. Before the informer has
// listed, the lookup waits (ErrNotReady) — unless listing was denied, which
// is an error to report.
func get[T runtime.Object](inf storeInformer, errs *failures, kind, namespace, name string) (T, error) {
	var zero T
	if !inf.HasSynced() {
		if err := errs.current(); err != nil && denied(err) {
			return zero, fmt.Errorf("%s %s: %w", kind, key(namespace, name), err)
		}
		return zero, fmt.Errorf("%s %s: %w", kind, key(namespace, name), errNotSynced)
	}
	obj, ok, err := inf.GetStore().GetByKey(key(namespace, name))
	if err != nil {
		return zero, err
	}
	return typed[T](obj, ok, kind, namespace, name)
}

// storeInformer is what get needs of an informer, shared or not.
type storeInformer interface {
	HasSynced() bool
	GetStore() cache.Store
}

// errNotSynced: the watch has not delivered its first list yet.
var errNotSynced = fmt.Errorf("not yet read from the API server: %w", volume.ErrNotReady)

func key(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// Status: synced once the pods bound to this node are listed and the Node
// object exists. A wrong --node-name lists no pods at all; taking that at
// its word would tear down every volume found on disk, so without the Node
// the source stays unsynced. Until then Reason says what is missing, and
// names a list the API server refused. Disconnected says why changes cannot
// be seen now: the API server does not answer the pod or Node informer, or
// one of them fails otherwise. Errors lists every failing watch.
func (s *Source) Status() source.Status {
	st := source.Status{Name: Name, Authoritative: true}
	podsErr, nodeErr := s.podErrs.current(), s.nodeErrs.current()
	podsRefused := !s.pods.HasSynced() && denied(podsErr)
	nodeRefused := !s.node.HasSynced() && denied(nodeErr)
	switch {
	case podsRefused:
		st.Reason = fmt.Sprintf("cannot list the pods bound to node %q: %v", s.cfg.NodeName, podsErr)
	case nodeRefused:
		st.Reason = fmt.Sprintf("cannot list node %q: %v", s.cfg.NodeName, nodeErr)
	case !s.pods.HasSynced() || !s.node.HasSynced():
		st.Reason = "pods bound to node " + s.cfg.NodeName + " not yet listed from the API server"
	case s.Node() == nil:
		st.Reason = fmt.Sprintf("node %q not found in the API server (is --node-name right?)", s.cfg.NodeName)
	default:
		st.Synced = true
	}
	if err := s.unreachable(); err != nil {
		st.Disconnected = "API server unreachable: " + err.Error()
	} else if podsErr != nil && !podsRefused {
		st.Disconnected = "cannot watch the pods bound to this node: " + podsErr.Error()
	} else if nodeErr != nil && !nodeRefused {
		st.Disconnected = fmt.Sprintf("cannot watch node %q: %v", s.cfg.NodeName, nodeErr)
	}
	st.Errors = s.watchErrors()
	return st
}

// unreachable returns why the pod or Node informer's last call got no
// answer from the API server, or nil.
func (s *Source) unreachable() error {
	if err := s.podsReach.current(); err != nil {
		return err
	}
	return s.nodeReach.current()
}

// watchErrors lists the current errors of every informer.
func (s *Source) watchErrors() []string {
	var out []string
	add := func(what string, err error) {
		if err != nil {
			out = append(out, what+": "+err.Error())
		}
	}
	add("pods", s.podErrs.current())
	add("node "+s.cfg.NodeName, s.nodeErrs.current())
	for _, l := range []*lazyInformer{s.pvs, s.pvcs} {
		add(l.kind+"s", l.current())
	}
	out = append(out, s.configMaps.errors()...)
	return append(out, s.secrets.errors()...)
}

// lookups resolves ConfigMaps and Secrets through the per-object watches.
type lookups struct{ s *Source }

func (l lookups) ConfigMap(namespace, name string) (*v1.ConfigMap, error) {
	return lookup[*v1.ConfigMap](l.s.configMaps, namespace, name)
}

func (l lookups) Secret(namespace, name string) (*v1.Secret, error) {
	return lookup[*v1.Secret](l.s.secrets, namespace, name)
}

func (l lookups) PersistentVolumeClaim(namespace, name string) (*v1.PersistentVolumeClaim, error) {
	return l.s.PersistentVolumeClaim(namespace, name)
}

func (l lookups) PersistentVolume(name string) (*v1.PersistentVolume, error) {
	return l.s.PersistentVolume(name)
}
