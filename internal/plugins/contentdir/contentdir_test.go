package contentdir_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/volume-agent/volume-agent/internal/atomicwriter"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/contentdir"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
)

// timedOutMounter is a Fake whose Mount runs out of time: it ends the
// set-up's context and fails with its error. Every call after it, the
// rollback's, must get a context that is still live (the undo must run) and
// has a deadline (the undo touches storage, which may hang too).
type timedOutMounter struct {
	*mount.Fake
	t        *testing.T
	cancel   context.CancelFunc
	timedOut bool // used by the SetUp goroutine only
}

func (m *timedOutMounter) Mount(ctx context.Context, _ mount.Mount, _ string) error {
	m.cancel()
	m.timedOut = true
	return ctx.Err()
}

func (m *timedOutMounter) Unmount(ctx context.Context, target string) error {
	m.checkRollback(ctx, "Unmount")
	return m.Fake.Unmount(ctx, target)
}

func (m *timedOutMounter) IsMountPoint(ctx context.Context, path string) (bool, error) {
	m.checkRollback(ctx, "IsMountPoint")
	return m.Fake.IsMountPoint(ctx, path)
}

func (m *timedOutMounter) MountsUnder(ctx context.Context, dir string) ([]string, error) {
	m.checkRollback(ctx, "MountsUnder")
	return m.Fake.MountsUnder(ctx, dir)
}

func (m *timedOutMounter) checkRollback(ctx context.Context, call string) {
	if !m.timedOut {
		return
	}
	if err := ctx.Err(); err != nil {
		m.t.Errorf("rollback %s got an ended context: %v", call, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		m.t.Errorf("rollback %s got a context without a deadline", call)
	}
}

func TestSetUpRollbackIsBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := &timedOutMounter{Fake: &mount.Fake{}, t: t, cancel: cancel}
	dir := plugintest.VolumeDir(t)
	payload := contentdir.Payload{"key": atomicwriter.File{Data: []byte("v"), Mode: 0o644}}
	err := contentdir.Dir{Mounter: m, Memory: true}.SetUp(ctx, dir, payload)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("SetUp = %v, want the mount's context.Canceled", err)
	}
	if got := m.Calls(); len(got) != 1 || got[0] != "unmount "+dir {
		t.Errorf("rollback calls = %q, want an unmount of the uncertain mount", got)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the directory SetUp created was not rolled back: Lstat = %v", err)
	}
}
