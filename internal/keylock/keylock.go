// Package keylock is a mutex per key: work on one key (a PV, an NFS
// server) is serialised, work on different keys runs at once. It starts no
// goroutines and never forgets a key: its users have a few keys per node.
package keylock

import "sync"

// Locks holds one mutex per key. Its zero value is ready to use.
type Locks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex // guarded by mu
}

// Lock locks key and returns its unlock.
func (l *Locks) Lock(key string) func() {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*sync.Mutex{}
	}
	m, ok := l.locks[key]
	if !ok {
		m = &sync.Mutex{}
		l.locks[key] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock
}
