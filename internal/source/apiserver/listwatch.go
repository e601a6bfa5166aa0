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

// listWatch lists and watches through a typed client, restricted by a field
// selector. It goes through the clientset's typed clients rather than its
// RESTClient so that a fake clientset can stand in for the API server, and
// tells the reflector when the clientset cannot serve watch-list requests.
func listWatch[L runtime.Object](client kubernetes.Interface, c lister[L], sel fields.Selector) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = sel.String()
			return c.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = sel.String()
			return c.Watch(ctx, opts)
		},
	}, client)
}
