package reconciler

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// checkedPlugin is a fakePlugin whose volumes can die while mounted.
type checkedPlugin struct {
	*fakePlugin
	mu       sync.Mutex
	dead     error // guarded by mu; what Check and SetUp return while set
	attempts int   // guarded by mu; SetUp calls
}

var _ volume.Checker = (*checkedPlugin)(nil)

func (p *checkedPlugin) Check(context.Context, string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead
}

func (p *checkedPlugin) SetUp(ctx context.Context, spec *volume.Spec, dir string) (volume.Result, error) {
	p.mu.Lock()
	p.attempts++
	p.mu.Unlock()
	if err := p.Check(ctx, dir); err != nil {
		return volume.Result{}, err
	}
	return p.fakePlugin.SetUp(ctx, spec, dir)
}

func (p *checkedPlugin) setUps() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attempts
}

func (p *checkedPlugin) kill(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dead = err
}

// A mounted volume that dies (its NFS server stops answering) turns
// Uncertain with the error, is set up again with backoff while it is dead,
// and is Mounted again once it lives.
func TestDeadVolumeIsFoundAndHeals(t *testing.T) {
	p := &checkedPlugin{fakePlugin: newFakePlugin()}
	core, logs := zapobserver.New(zap.DebugLevel)
	h := newHarness(t, func(c *Config) {
		c.Plugins = registry{testPlugin: p}
		c.CheckPeriod = 20 * time.Millisecond
		c.Logger = zap.New(core)
	})
	h.desired.SetPod(desiredPod("p1", desiredVolume("a", "1")))
	h.desired.MarkPopulated()
	h.start(t)
	h.waitMounted(t, "p1", "a", "1")

	p.kill(errInjected)
	waitFor(t, "the dead volume Uncertain, with the error", func() bool {
		v, _ := h.actualVolume("p1", "a")
		return v.State == asw.Uncertain && h.desired.Error(volumeKey("p1", "a")) != ""
	})
	checkEntry(t, waitLog(t, logs, "mounted volume found dead; setting it up again"), zapcore.WarnLevel,
		map[string]any{"pod": "ns/p1", "podUID": "p1", "volume": "a", "error": errInjected.Error()})
	setUps := p.setUps()
	waitFor(t, "set-up retried while dead", func() bool { return p.setUps() > setUps+1 })

	p.kill(nil)
	h.waitMounted(t, "p1", "a", "1")
	waitFor(t, "the error cleared", func() bool { return h.desired.Error(volumeKey("p1", "a")) == "" })
	if got := p.callsOf("teardown"); len(got) > 0 {
		t.Fatalf("a dead volume of a wanted pod was torn down: %v", got)
	}
}

func volumeKey(uid, name string) dsw.Key { return dsw.Key{PodUID: types.UID(uid), Volume: name} }
