package plugintest

import (
	"context"
	"testing"

	"github.com/volume-agent/volume-agent/internal/mount"
)

// TimedOutMounter is a Fake whose Mount runs out of time: it ends the
// set-up's context (Cancel) and fails with its error. Every call after it —
// the rollback's — must get a context that is still live (the undo must
// run) and has a deadline (the undo touches storage, which may hang too);
// it reports a test error otherwise.
type TimedOutMounter struct {
	*mount.Fake
	T        *testing.T
	Cancel   context.CancelFunc
	timedOut bool // used by the SetUp goroutine only
}

// Mount ends the set-up's context and fails.
func (m *TimedOutMounter) Mount(ctx context.Context, _ mount.Mount, _ string) error {
	m.Cancel()
	m.timedOut = true
	return ctx.Err()
}

// Unmount checks the rollback's context.
func (m *TimedOutMounter) Unmount(ctx context.Context, target string) error {
	m.checkRollback(ctx, "Unmount")
	return m.Fake.Unmount(ctx, target)
}

// IsMountPoint checks the rollback's context.
func (m *TimedOutMounter) IsMountPoint(ctx context.Context, path string) (bool, error) {
	m.checkRollback(ctx, "IsMountPoint")
	return m.Fake.IsMountPoint(ctx, path)
}

// MountsUnder checks the rollback's context.
func (m *TimedOutMounter) MountsUnder(ctx context.Context, dir string) ([]string, error) {
	m.checkRollback(ctx, "MountsUnder")
	return m.Fake.MountsUnder(ctx, dir)
}

func (m *TimedOutMounter) checkRollback(ctx context.Context, call string) {
	if !m.timedOut {
		return
	}
	if err := ctx.Err(); err != nil {
		m.T.Errorf("rollback %s got an ended context: %v", call, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		m.T.Errorf("rollback %s got a context without a deadline", call)
	}
}
