package nfssubdir

import (
	"strings"
	"sync"
)

// serverLocks serialise, per NFS server, the steps that decide whether a
// directory is free and take it (Provision), and those that give it up
// (Commit, Abandon): so that two claims whose paths meet never both find
// it free. A hung server holds up only its own claims.
type serverLocks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex // guarded by mu; one per server, never removed: a cluster has few
}

// lock locks server (in any case) and returns the unlock.
func (l *serverLocks) lock(server string) func() {
	key := strings.ToLower(server)
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
