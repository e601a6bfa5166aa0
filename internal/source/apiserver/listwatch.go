package apiserver

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// lister is the list and watch half of a typed client (PodInterface,
// ConfigMapInterface…).
type lister[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// observer learns the outcome of every list and watch call of an informer,
// made under ctx; it must not block.
type observer interface {
	observe(ctx context.Context, err error)
}

// listWatch lists and watches through a typed client, restricted by a field
// selector, and tells the observers the outcome of every call. It goes
// through the clientset's typed clients rather than its RESTClient so that
// a fake clientset can stand in for the API server, and tells the reflector
// when the clientset cannot serve watch-list requests.
func listWatch[L runtime.Object](client kubernetes.Interface, c lister[L], sel fields.Selector, observers ...observer) cache.ListerWatcher {
	observe := func(ctx context.Context, err error) {
		for _, o := range observers {
			o.observe(ctx, err)
		}
	}
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = sel.String()
			list, err := c.List(ctx, opts)
			observe(ctx, err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = sel.String()
			w, err := c.Watch(ctx, opts)
			observe(ctx, err)
			return w, err
		},
	}, client)
}

// plainLists wraps a clientset to tell the reflector to list with LIST
// requests rather than watch-list streams. The pod and Node informers use
// it because their calls decide whether the API server is reachable: a
// LIST that times out (a TLS handshake to a hung server) fails and counts,
// while client-go retries a timed-out watch request itself for about two
// minutes and then hands back an empty watch with no error. Their lists are
// small (one node's pods, one Node), so a stream would save nothing.
type plainLists struct{ kubernetes.Interface }

func (plainLists) IsWatchListSemanticsUnSupported() bool { return true }
