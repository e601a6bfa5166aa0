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
// after an RBAC change, a resource the server does not serve — until a
// later list or watch call of the informer succeeds, and calls notify when
// that error changes, so that a lookup that waits for the informer is made
// again and can report it. Without it such errors only reach the log, and
// what depends on the informer waits silently.
type failures struct {
	notify func() // called from the informer's goroutine; must not block

	mu  sync.Mutex
	err error // guarded by mu
}

func newFailures(notify func()) *failures { return &failures{notify: notify} }

// install makes f the error handler of inf; call before inf runs. The
// informer's list and watch calls must also report to f.observe.
func (f *failures) install(inf cache.SharedIndexInformer) {
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		if !routine(err) && f.set(err) {
			f.notify()
		}
	})
}

// routine errors end watches in normal operation; the reflector recovers.
func routine(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.Canceled) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

// set records err and reports whether it differs from the current error.
// The reflector retries a failing list with backoff; the same error again
// changes nothing a lookup would say.
func (f *failures) set(err error) (changed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	changed = f.err == nil || f.err.Error() != err.Error()
	f.err = err
	return changed
}

// observe implements observer: a call that succeeded ends the failure; one
// that failed other than routinely is the failure (for an informer without
// an error handler: see objectInformer).
func (f *failures) observe(_ context.Context, err error) {
	if err != nil {
		if !routine(err) && f.set(err) {
			f.notify()
		}
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = nil
}

// current returns the last error unless a call has succeeded since.
func (f *failures) current() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// denied reports whether err says the agent may not read the object: a
// misconfiguration to report (FailedMount), not a delay to wait out.
func denied(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)
}
