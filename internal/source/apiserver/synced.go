package apiserver

import (
	"context"

	"k8s.io/client-go/tools/cache"
)

// whenSynced returns a function, for the runner, that calls notify once
// every informer has synced (HasSynced is true by then), or returns when
// ctx ends first. It waits on the informers' done channels; nothing polls.
//
// Event handlers alone are not enough: a first list that finds nothing
// sends no event, and the handler of a first list that finds the object can
// run before HasSynced is true. A lookup made then answers "not known yet",
// and without this call nothing would make it again until a slow resync.
func whenSynced(notify func(), informers ...syncChecker) func(context.Context) {
	return func(ctx context.Context) {
		for _, inf := range informers {
			select {
			case <-inf.HasSyncedChecker().Done():
			case <-ctx.Done():
				return
			}
		}
		notify()
	}
}

// syncChecker is an informer that tells when it has synced.
type syncChecker interface {
	HasSyncedChecker() cache.DoneChecker
}
