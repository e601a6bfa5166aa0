package apiserver

import (
	"context"
	"errors"
	"io"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
)

// failures remembers the last list/watch error of one informer — a 403
// after an RBAC change, a resource the server does not serve — until the
// informer lists again (its resourceVersion moves). Without it such errors
// only reach the log, and what depends on the informer waits silently.
type failures struct {
	inf cache.SharedIndexInformer

	mu  sync.Mutex
	err error  // guarded by mu
	rv  string // guarded by mu; the informer's resourceVersion at err
}

// trackFailures installs the error handler on inf; call before inf runs.
func trackFailures(inf cache.SharedIndexInformer) *failures {
	f := &failures{inf: inf}
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		if !routine(err) {
			f.set(err)
		}
	})
	return f
}

// routine errors end watches in normal operation; the reflector recovers.
func routine(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.Canceled) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

func (f *failures) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err, f.rv = err, f.inf.LastSyncResourceVersion()
}

// current returns the last error unless the informer has listed since.
func (f *failures) current() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil && f.inf.LastSyncResourceVersion() == f.rv {
		return f.err
	}
	f.err = nil
	return nil
}

// denied reports whether err says the agent may not read the object: a
// misconfiguration to report (FailedMount), not a delay to wait out.
func denied(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)
}
