package apiserver

import (
	"context"
	"errors"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// reachability judges whether the API server answers from the list and
// watch calls of one informer the source cannot work without (the pods
// bound to this node, the Node). Only these calls count: a 5xx on an event
// a webhook rejected, or one failed TokenRequest, says nothing about
// whether the node's pods can be watched, and the watches of these two
// informers are always open, so a hung or unreachable server shows in them.
//
// A call that gets an answer — an object, a watch, or any status below
// 500, a 403 included — marks the server reachable. A transport error (a
// refused connection, a TLS handshake time-out, an HTTP/2 connection whose
// health check failed), a 5xx or a time-out marks it unreachable until a
// later call gets an answer. A call cut short because the informer is
// stopping says nothing. A nil *reachability records nothing.
type reachability struct {
	mu  sync.Mutex
	err error // guarded by mu; nil while the last call got an answer
}

// observe records the outcome of one list or watch call made under ctx.
func (r *reachability) observe(ctx context.Context, err error) {
	if r == nil || ctx.Err() != nil {
		return // the informer is stopping
	}
	if answered(err) {
		err = nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}

// current returns why the last call got no answer, or nil.
func (r *reachability) current() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// answered reports whether a call's outcome came from the API server
// itself: success, or a status below 500.
func answered(err error) bool {
	if err == nil {
		return true
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	code := status.Status().Code
	return code > 0 && code < 500
}
