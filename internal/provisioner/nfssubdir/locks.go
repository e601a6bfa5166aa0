package nfssubdir

import (
	"strings"

	"github.com/volume-agent/volume-agent/internal/keylock"
)

// serverLocks serialise, per NFS server, the steps that decide whether a
// directory is free and take it (Provision), and those that give it up
// (Commit, Abandon): so that two claims whose paths meet never both find
// it free. A hung server holds up only its own claims.
type serverLocks struct{ locks keylock.Locks }

// lock locks server (in any case) and returns the unlock.
func (l *serverLocks) lock(server string) func() { return l.locks.Lock(strings.ToLower(server)) }
