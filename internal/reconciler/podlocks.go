package reconciler

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// podLocks serialises the removal of a pod's directory with the operations
// on its volumes: volume operations share a pod's lock, cleanup holds it
// alone. Locks exist only while someone holds or waits for them.
type podLocks struct {
	mu    sync.Mutex
	locks map[types.UID]*podLock // guarded by mu
}

type podLock struct {
	rw    sync.RWMutex
	users int // guarded by podLocks.mu
}

// rlock takes the pod's lock shared and returns its release.
func (p *podLocks) rlock(uid types.UID) func() {
	l := p.acquire(uid)
	l.rw.RLock()
	return func() { l.rw.RUnlock(); p.release(uid) }
}

// lock takes the pod's lock exclusively and returns its release.
func (p *podLocks) lock(uid types.UID) func() {
	l := p.acquire(uid)
	l.rw.Lock()
	return func() { l.rw.Unlock(); p.release(uid) }
}

func (p *podLocks) acquire(uid types.UID) *podLock {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.locks == nil {
		p.locks = map[types.UID]*podLock{}
	}
	l, ok := p.locks[uid]
	if !ok {
		l = &podLock{}
		p.locks[uid] = l
	}
	l.users++
	return l
}

func (p *podLocks) release(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.locks[uid]; l != nil {
		if l.users--; l.users == 0 {
			delete(p.locks, uid)
		}
	}
}
