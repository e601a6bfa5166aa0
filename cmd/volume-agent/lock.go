package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// lockWait is how long a start waits for another agent to let go of the
// root: long enough for the agent it replaces (a DaemonSet's rolling
// update, a restart by systemd) to exit after SIGTERM (exitDeadline).
var lockWait = 15 * time.Second

// lockRoot takes an exclusive lock (flock(2)) on the local path root
// directory itself for the life of the process, so that two agents never
// provision into, or delete from, the same root: each would take the
// other's volumes for its own. The lock lives as long as the returned
// file stays open; the kernel drops it when the process exits, however it
// exits. Nothing is written: a read-only root can be locked too.
func lockRoot(root string, log *zap.Logger) (*os.File, error) {
	f, err := os.OpenFile(root, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0) //nolint:gosec // G304: --local-path-root is the operator's flag, opened O_NOFOLLOW
	if err != nil {
		return nil, fmt.Errorf("--local-path-root: lock %s: %w", root, err)
	}
	deadline := time.Now().Add(lockWait)
	for logged := false; ; logged = true {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			break
		}
		if !logged {
			log.Info("waiting for another agent to release the local path root", zap.String("root", root), zap.Duration("wait", lockWait))
		}
		time.Sleep(100 * time.Millisecond)
	}
	switch {
	case errors.Is(err, unix.EWOULDBLOCK):
		_ = f.Close() // only read: the lock was not taken
		return nil, fmt.Errorf("--local-path-root %s is in use by another volume-agent (it holds a lock on the directory): two agents sharing a root would hand out, and delete, each other's volumes; give each agent its own --local-path-root", root)
	case err != nil:
		_ = f.Close() // only read: the lock was not taken
		return nil, fmt.Errorf("--local-path-root: lock %s: %w", root, err)
	}
	return f, nil
}
