package apiserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// readTimeout bounds the direct read of a newly referenced object; the
// object's watch starts only after it.
const readTimeout = 5 * time.Second

// Tokens says whether a request may be made now, without waiting
// (flowcontrol.PassiveRateLimiter has this method).
type Tokens interface{ TryAccept() bool }

// reader makes one direct read (a GET) of each ConfigMap or Secret when a
// pod first refers to it, before the object's watch starts.
//
// Why: the watch of one object starts by listing it, and the API server
// serves that list from its watch cache only once the cache has caught up
// with etcd's current revision. The cache learns that revision from an etcd
// progress notification, which it asks for on a 100 ms timer
// (k8s.io/apiserver storage/cacher/progress), so the first list of a new
// watch answers up to ~100 ms after it was sent (85 ms measured on
// loopback, BenchmarkNewPodObjectsReady), while the pod that refers to the
// object arrives in about 2 ms. A GET without a resourceVersion is a quorum
// read from etcd: found or not found, it is as current as that list would
// be, in one round trip.
//
// The read is a request the watch alone would not make, so it is made only
// while tokens allows one now: a burst of new objects reads as many as the
// budget allows and the rest wait for their watches, which the API server
// answers together (one progress notification releases every waiting list).
// A read that fails — forbidden where the RBAC grants list and watch but not
// get, a time-out — leaves lookups waiting for the watch as before; only the
// watch's own errors are reported, and only the pod and Node informers judge
// whether the API server is reachable.
type reader struct {
	resource string // "configmaps" or "secrets", for logs
	get      func(context.Context, ref) (runtime.Object, error)
	tokens   Tokens // nil: every new object is read
	log      *zap.Logger

	forbidden sync.Once // logs once that the RBAC grants no get
}

// firstRead is what the direct read found: obj is nil when the API server
// said the object does not exist.
type firstRead struct{ obj runtime.Object }

// read GETs the object; ok is false when there is no answer to serve.
func (rd *reader) read(ctx context.Context, r ref) (_ *firstRead, ok bool) {
	if rd == nil || (rd.tokens != nil && !rd.tokens.TryAccept()) {
		return nil, false
	}
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	obj, err := rd.get(rctx, r)
	switch {
	case err == nil:
		return &firstRead{obj: obj}, true
	case apierrors.IsNotFound(err):
		return &firstRead{}, true
	case denied(err):
		rd.forbidden.Do(func() {
			rd.log.Warn("cannot get objects directly; new pods wait for their watches (grant get on them to the agent)",
				zap.String("resource", rd.resource), zap.Error(err))
		})
	case ctx.Err() == nil: // not unreferenced or shutting down meanwhile
		rd.log.Debug("direct read failed; waiting for the watch", zap.String("resource", rd.resource),
			zap.String("namespace", r.namespace), zap.String("name", r.name), zap.Error(err))
	}
	return nil, false
}

// getObject adapts a typed client's Get to reader.get: with its error a
// typed client returns a nil pointer, which as a runtime.Object is not nil.
func getObject[T runtime.Object](obj T, err error) (runtime.Object, error) {
	if err != nil {
		return nil, err
	}
	return obj, nil
}

// typed returns what a read or a watch found as T, or ErrNotFound.
func typed[T runtime.Object](obj any, exists bool, kind, namespace, name string) (T, error) {
	var zero T
	if !exists {
		return zero, fmt.Errorf("%s %s: %w", kind, key(namespace, name), volume.ErrNotFound)
	}
	t, ok := obj.(T)
	if !ok {
		return zero, fmt.Errorf("%s %s: unexpected type %T", kind, key(namespace, name), obj)
	}
	return t, nil
}
