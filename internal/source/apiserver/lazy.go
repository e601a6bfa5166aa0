package apiserver

import (
	"context"
	"fmt"
	"sync"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// lazyInformer is a cluster-wide informer started on first use, so that an
// agent whose pods use no persistent volumes never lists every PV and PVC
// of the cluster. Its cache drops managedFields. Like a per-object watch,
// it signals a change on its events, once it has synced, and when its list
// or watch fails anew. When its list is refused (a node identity may not
// list claims and PVs) and byGet is set, it stops and lookups read each
// object by GET through byGet instead.
type lazyInformer struct {
	kind     string
	build    func(observer) cache.SharedIndexInformer // the observer sees its calls
	runner   *runner
	onChange func()
	byGet    *polled // nil: a refused list is reported, as for any informer
	log      *zap.Logger

	mu       sync.Mutex
	inf      cache.SharedIndexInformer // guarded by mu; nil until first use
	failures *failures                 // guarded by mu
	stop     context.CancelFunc        // guarded by mu; ends inf
	polling  bool                      // guarded by mu; lookups go to byGet
}

// informer starts the informer if needed and returns it, or an error
// wrapping volume.ErrNotReady before the source runs.
func (l *lazyInformer) informer() (cache.SharedIndexInformer, error) {
	ctx := l.runner.context()
	if ctx == nil {
		return nil, fmt.Errorf("%s lookups before the API source runs: %w", l.kind, volume.ErrNotReady)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inf == nil {
		errs := newFailures(l.onChange)
		inf := l.build(errs)
		errs.install(inf)
		_ = inf.SetTransform(dropManagedFields)
		_, _ = inf.AddEventHandler(notifyHandler(l.onChange))
		l.failures = errs
		ctx, l.stop = context.WithCancel(ctx)
		l.runner.run(ctx, inf.RunWithContext)
		l.runner.run(ctx, whenSynced(l.onChange, inf))
		l.inf = inf
	}
	return l.inf, nil
}

// polls reports whether lookups read by GET.
func (l *lazyInformer) polls() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.polling
}

// pollIfRefused stops the informer and turns lookups to GETs if its list
// was refused and there is a way to GET; it reports whether it did.
func (l *lazyInformer) pollIfRefused(inf cache.SharedIndexInformer, errs *failures) bool {
	err := errs.current()
	if l.byGet == nil || inf.HasSynced() || !denied(err) {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.polling {
		l.polling = true
		l.stop()
		logSwitch(l.log, l.kind, err)
	}
	return true
}

// current returns the informer's current watch error, if it runs.
func (l *lazyInformer) current() error {
	l.mu.Lock()
	f, polling := l.failures, l.polling
	l.mu.Unlock()
	if f == nil || polling {
		return nil
	}
	return f.current()
}

func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// lazyGet looks an object up through a lazy informer, or by GET once its
// list was refused.
func lazyGet[T runtime.Object](l *lazyInformer, namespace, name string) (T, error) {
	if l.polls() {
		return polledGet[T](l.byGet, namespace, name)
	}
	inf, err := l.informer()
	if err != nil {
		var zero T
		return zero, err
	}
	l.mu.Lock()
	errs := l.failures
	l.mu.Unlock()
	if l.pollIfRefused(inf, errs) {
		return polledGet[T](l.byGet, namespace, name)
	}
	return get[T](inf, errs, l.kind, namespace, name)
}
