package apiserver

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/volume-agent/volume-agent/internal/volume"
	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// ref names a namespaced object.
type ref struct{ namespace, name string }

// objects keeps one watch per referenced object of one resource, and
// reads each object once directly when a pod first refers to it.
type objects struct {
	resource  string // "configmaps" or "secrets"
	example   runtime.Object
	listWatch func(ref, observer) cache.ListerWatcher // of the one object
	reader    *reader                                 // nil: no direct reads
	runner    *runner
	log       *zap.Logger
	onChange  func()

	mu sync.Mutex
	// refs counts the pods referring to each object; entries holds a
	// watch for each of them once the source runs.
	refs    map[ref]int      // guarded by mu
	entries map[ref]*watched // guarded by mu; nil until the first watch
	// behind is set when refs changed before the source ran: the next
	// update then makes entries match refs in full.
	behind bool // guarded by mu
}

// watched is the watch of one object. An immutable object is kept in
// frozen and its watch stopped (or never started). first is what the
// direct read found, served until the watch has listed.
type watched struct {
	informer *objectInformer
	failures *failures
	stop     context.CancelFunc
	frozen   runtime.Object // guarded by objects.mu
	first    *firstRead     // guarded by objects.mu
}

// objectInformer is the informer of one object: a store kept by a
// reflector, and one handler called after each change is in the store.
// Not a shared informer: nothing else listens, and a shared informer's
// listener buffers 1,024 notifications (16 KiB) and runs two more
// goroutines, per watched object — a quarter of the heap with 110 pods.
// A list or watch call that fails reaches the informer's failures through
// its ListerWatcher (listWatch's observers).
type objectInformer struct {
	cache.Controller
	store cache.Store
}

func newObjectInformer(lw cache.ListerWatcher, example runtime.Object, h cache.ResourceEventHandler) *objectInformer {
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: lw, ObjectType: example, Handler: h})
	return &objectInformer{Controller: ctrl, store: store}
}

// GetStore returns the object's store (empty, or the one object).
func (i *objectInformer) GetStore() cache.Store { return i.store }

// update counts one pod's new references (added) and dropped ones
// (removed): an object's watch starts with its first reference and stops
// with its last.
func (o *objects) update(added, removed []ref) {
	if len(added)+len(removed) == 0 {
		return
	}
	ctx := o.runner.context()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.refs == nil {
		o.refs, o.entries = map[ref]int{}, map[ref]*watched{}
	}
	for _, r := range added {
		o.refs[r]++
	}
	for _, r := range removed {
		if o.refs[r]--; o.refs[r] <= 0 {
			delete(o.refs, r)
		}
	}
	switch {
	case ctx == nil:
		o.behind = true // not running yet; the first update after start catches up
	case o.behind:
		o.behind = false
		o.syncLocked(ctx)
	default:
		for _, r := range slices.Concat(removed, added) {
			o.watchOneLocked(ctx, r)
		}
	}
}

// syncLocked makes the watched objects exactly those refs counts.
func (o *objects) syncLocked(ctx context.Context) {
	for r, w := range o.entries {
		if o.refs[r] == 0 {
			w.stop()
			delete(o.entries, r)
		}
	}
	for r := range o.refs {
		o.watchOneLocked(ctx, r)
	}
}

// watchOneLocked starts the watch of r when a pod refers to it and it has
// none, and stops it when no pod does.
func (o *objects) watchOneLocked(ctx context.Context, r ref) {
	w, watching := o.entries[r]
	switch wanted := o.refs[r] > 0; {
	case wanted && !watching:
		o.entries[r] = o.startLocked(ctx, r)
	case !wanted && watching:
		w.stop()
		delete(o.entries, r)
	}
}

// startLocked reads one object directly, then starts its watch. Besides
// its events, the watch signals a change once it has synced (the object may
// not exist) and when its list or watch fails anew (a 403 fails the volume
// at once).
func (o *objects) startLocked(parent context.Context, r ref) *watched {
	ctx, cancel := context.WithCancel(parent)
	errs := newFailures(o.onChange)
	inf := newObjectInformer(o.listWatch(r, errs), o.example, cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.changed(r, obj) },
		UpdateFunc: func(_, obj any) { o.changed(r, obj) },
		DeleteFunc: func(any) { o.onChange() },
	})
	w := &watched{informer: inf, failures: errs, stop: cancel}
	o.runner.run(ctx, func(ctx context.Context) {
		if o.readFirst(ctx, r, w) {
			inf.RunWithContext(ctx)
		}
	})
	o.runner.run(ctx, whenSynced(func() { o.listed(r, w) }, inf))
	o.log.Debug("watching object", zap.String("resource", o.resource), zap.String("namespace", r.namespace), zap.String("name", r.name))
	return w
}

// readFirst reads a newly referenced object directly (see reader) and
// signals the answer. It runs before the object's watch starts, so what the
// watch lists is never older than what the read saw. It reports whether the
// watch is needed: not for an immutable object, nor once w is unreferenced.
func (o *objects) readFirst(ctx context.Context, r ref, w *watched) (watch bool) {
	got, ok := o.reader.read(ctx, r)
	if !ok {
		return true
	}
	o.log.Debug("object read directly", zap.String("resource", o.resource), zap.String("namespace", r.namespace), zap.String("name", r.name), zap.Bool("found", got.obj != nil))
	o.mu.Lock()
	switch {
	case o.entries[r] != w:
		watch = false // unreferenced meanwhile; its context has ended
	case got.obj != nil && isImmutable(got.obj):
		w.frozen = got.obj
		w.stop()
		o.log.Debug("immutable object read; not watched", zap.String("resource", o.resource), zap.String("namespace", r.namespace), zap.String("name", r.name))
	default:
		w.first, watch = got, true
	}
	o.mu.Unlock()
	o.onChange()
	return watch
}

// listed signals that the watch has synced, and drops the direct read's
// answer, which the watch's store now replaces.
func (o *objects) listed(r ref, w *watched) {
	o.mu.Lock()
	w.first = nil
	o.mu.Unlock()
	o.onChange()
}

// changed freezes immutable objects (no watch needed after the first read)
// and signals the change.
func (o *objects) changed(r ref, obj any) {
	if isImmutable(obj) {
		o.mu.Lock()
		if w, ok := o.entries[r]; ok && w.frozen == nil {
			w.frozen = obj.(runtime.Object)
			w.stop()
			o.log.Debug("immutable object read; watch stopped", zap.String("resource", o.resource), zap.String("namespace", r.namespace), zap.String("name", r.name))
		}
		o.mu.Unlock()
	}
	o.onChange()
}

func isImmutable(obj any) bool {
	switch t := obj.(type) {
	case *v1.ConfigMap:
		return t.Immutable != nil && *t.Immutable
	case *v1.Secret:
		return t.Immutable != nil && *t.Immutable
	}
	return false
}

// lookup returns a watched object: ErrNotFound when the API server says it
// does not exist, another error while it is not known yet. Until the watch
// has listed, the direct read answers, unless the watch is refused: a
// denial is reported rather than hidden behind an answer never updated.
func lookup[T runtime.Object](o *objects, namespace, name string) (T, error) {
	var zero T
	r := ref{namespace, name}
	o.mu.Lock()
	w, ok := o.entries[r]
	var frozen runtime.Object
	var first *firstRead
	if ok {
		frozen, first = w.frozen, w.first // set under mu
	}
	o.mu.Unlock()
	switch {
	case !ok:
		return zero, fmt.Errorf("%s %s/%s: not watched yet: %w", o.resource, namespace, name, volume.ErrNotReady)
	case frozen != nil:
		return frozen.(T), nil
	case first != nil && !w.informer.HasSynced() && !denied(w.failures.current()):
		return typed[T](first.obj, first.obj != nil, o.resource, namespace, name)
	}
	return get[T](w.informer, w.failures, o.resource, namespace, name)
}

// errors lists the current watch errors, "resource ns/name: error".
func (o *objects) errors() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for r, w := range o.entries {
		if w.frozen == nil {
			if err := w.failures.current(); err != nil {
				out = append(out, fmt.Sprintf("%s %s/%s: %v", o.resource, r.namespace, r.name, err))
			}
		}
	}
	sort.Strings(out)
	return out
}
