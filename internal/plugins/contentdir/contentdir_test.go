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

func TestSetUpRollbackIsBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := &plugintest.TimedOutMounter{Fake: &mount.Fake{}, T: t, Cancel: cancel}
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
