package dsw

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// maxChanges bounds a Changes set: past it, naming pods one by one costs
// more than looking at all of them, and a consumer that does not take its
// changes for a long time must not make the set grow without end.
const maxChanges = 4096

// Changes collects the pods whose state changed since its owner last took
// them, so that the owner can look again at those pods only. Both worlds
// feed the Changes of their watchers (World.Watch, asw's Watch). A change
// is recorded before the world's onChange callback runs, so an owner woken
// by that callback finds it. Changes is safe for concurrent use.
type Changes struct {
	mu   sync.Mutex
	pods map[types.UID]struct{} // guarded by mu
	// all says that any pod may have changed: the owner has not looked
	// yet, or the set overflowed.
	all bool // guarded by mu
}

// NewChanges returns a set that says "all" until first taken: its owner
// has not looked at anything yet.
func NewChanges() *Changes {
	return &Changes{pods: map[types.UID]struct{}{}, all: true}
}

// add records a change of pod uid.
func (c *Changes) add(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.all {
		return
	}
	if len(c.pods) >= maxChanges {
		c.all = true
		c.pods = map[types.UID]struct{}{}
		return
	}
	c.pods[uid] = struct{}{}
}

// Take returns the pods changed since the last Take and forgets them; all
// is true when any pod may have changed (pods is then nil).
func (c *Changes) Take() (pods []types.UID, all bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.all {
		c.all = false
		return nil, true
	}
	for uid := range c.pods {
		pods = append(pods, uid)
	}
	if len(pods) > 0 {
		// A new map: a cleared one would keep the room of the largest
		// set it ever held.
		c.pods = map[types.UID]struct{}{}
	}
	return pods, false
}

// Watchers is the set of Changes a world feeds (this one's and the actual
// state's). Its zero value is ready to use.
type Watchers struct {
	mu   sync.Mutex
	list []*Changes // guarded by mu
}

// Watch returns a new Changes fed with every later change.
func (w *Watchers) Watch() *Changes {
	c := NewChanges()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, c)
	return c
}

// Add records a change of pod uid in every watcher's set.
func (w *Watchers) Add(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.list {
		c.add(uid)
	}
}
