package reconciler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/executor"
	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/volume"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testPlugin is the plugin the integration tests run with.
const testPlugin = "test.io/fake"

var errInjected = errors.New("injected failure")

// fakePlugin records its calls and creates and removes its volume
// directories. It can be told to fail, to block until its context ends, or
// to block until released.
type fakePlugin struct {
	mu     sync.Mutex
	calls  []string    // guarded by mu; "setup pod/volume", "teardown pod/volume"
	setUps []time.Time // guarded by mu; when each SetUp started
	fail   error       // guarded by mu; returned by SetUp when set
	// failMade makes a failing SetUp create the directories above the
	// volume's first, as an NFS mount the server refuses does.
	failMade     bool          // guarded by mu
	failTearDown error         // guarded by mu; returned by TearDown when set
	blockCtx     bool          // guarded by mu; SetUp waits for its context to end
	release      chan struct{} // guarded by mu; when set, SetUp waits for it to close
	swap         volume.Swap   // guarded by mu; what a SetUp that succeeds reports
	onSetUp      func()        // guarded by mu; called first by SetUp when set
}

var _ volume.Plugin = (*fakePlugin)(nil)

func newFakePlugin() *fakePlugin { return &fakePlugin{} }

func (p *fakePlugin) Name() string               { return testPlugin }
func (p *fakePlugin) CanSupport(*v1.Volume) bool { return true }

// volumeOf turns <root>/pods/<uid>/volumes/<plugin>/<volume> into "uid/volume".
func volumeOf(dir string) string {
	return filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(dir)))) + "/" + filepath.Base(dir)
}

func (p *fakePlugin) SetUp(ctx context.Context, _ *volume.Spec, dir string) (volume.Result, error) {
	call := "setup " + volumeOf(dir)
	p.mu.Lock()
	p.calls = append(p.calls, call)
	p.setUps = append(p.setUps, time.Now())
	fail, failMade, blockCtx, release, swap, onSetUp := p.fail, p.failMade, p.blockCtx, p.release, p.swap, p.onSetUp
	p.mu.Unlock()
	if onSetUp != nil {
		onSetUp()
	}
	switch {
	case fail != nil && failMade:
		if err := os.MkdirAll(filepath.Dir(dir), 0o750); err != nil {
			return volume.Result{}, err
		}
		return volume.Result{}, fail
	case fail != nil:
		return volume.Result{}, fail
	case blockCtx:
		<-ctx.Done()
		return volume.Result{}, fmt.Errorf("set up %s: %w", dir, ctx.Err())
	case release != nil:
		<-release
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return volume.Result{}, err
	}
	return volume.Result{Path: dir, Swap: swap}, nil
}

func (p *fakePlugin) TearDown(_ context.Context, dir string) error {
	p.mu.Lock()
	p.calls = append(p.calls, "teardown "+volumeOf(dir))
	fail := p.failTearDown
	p.mu.Unlock()
	if fail != nil {
		return fail
	}
	return os.RemoveAll(dir)
}

func (p *fakePlugin) set(f func(p *fakePlugin)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

// callsOf returns the calls whose text starts with prefix ("setup", "teardown").
func (p *fakePlugin) callsOf(prefix string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, c := range p.calls {
		if strings.HasPrefix(c, prefix+" ") {
			out = append(out, c)
		}
	}
	return out
}

func (p *fakePlugin) setUpTimes() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.setUps)
}

// registry is a Plugins of fixed plugins.
type registry map[string]volume.Plugin

func (r registry) All() []volume.Plugin {
	var out []volume.Plugin
	for _, p := range r {
		out = append(out, p)
	}
	return out
}

func (r registry) Get(name string) (volume.Plugin, bool) {
	p, ok := r[name]
	return p, ok
}

// observer records "plugin operation outcome" for every operation.
type observer struct {
	mu  sync.Mutex
	ops []string // guarded by mu
}

func (o *observer) ObserveOperation(plugin, operation, outcome string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ops = append(o.ops, plugin+" "+operation+" "+outcome)
}

// all returns every operation observed so far, in order.
func (o *observer) all() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ops)
}

func (o *observer) saw(op string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Contains(o.ops, op)
}

// harness runs a Reconciler over real worlds in a temporary root.
type harness struct {
	root     layout.Root
	desired  *dsw.World
	actual   *asw.World
	plugin   *fakePlugin
	observer *observer
	r        *Reconciler

	cancel context.CancelFunc
	done   chan error
}

// newHarness builds a reconciler; tune may change its Config. It starts
// nothing. Every test ends with a goroutine leak check.
func newHarness(t *testing.T, tune func(*Config)) *harness {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first: runs last
	h := &harness{root: layout.Root(t.TempDir()), plugin: newFakePlugin(), observer: &observer{}}
	h.desired = dsw.New(func() { h.r.Notify() })
	h.actual = asw.New(nil)
	cfg := Config{
		Desired:  h.desired,
		Actual:   h.actual,
		Plugins:  registry{testPlugin: h.plugin},
		Root:     h.root,
		Logger:   zaptest.NewLogger(t),
		Observer: h.observer,
		Executor: executor.Config{InitialBackoff: 20 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, Timeout: 5 * time.Second},
		Resync:   time.Hour,
	}
	if tune != nil {
		tune(&cfg)
	}
	h.r = New(cfg)
	return h
}

func (h *harness) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- h.r.Run(ctx) }()
	t.Cleanup(func() { h.stop(t) })
}

// stop cancels Run and waits for it; it is safe to call twice.
func (h *harness) stop(t *testing.T) {
	t.Helper()
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}

func desiredVolume(name, version string) dsw.Volume {
	return dsw.Volume{Name: name, Plugin: testPlugin, Spec: &volume.Spec{}, Version: version}
}

func desiredPod(uid string, vols ...dsw.Volume) dsw.Pod {
	return dsw.Pod{UID: types.UID(uid), Namespace: "ns", Name: uid, Source: "test", Volumes: vols}
}

func (h *harness) volumeDir(uid, name string) string {
	return h.root.VolumeDir(types.UID(uid), testPlugin, name)
}

func (h *harness) actualVolume(uid, name string) (asw.Volume, bool) {
	return h.actual.Get(dsw.Key{PodUID: types.UID(uid), Volume: name})
}

// waitMounted waits until uid/name is Mounted at version.
func (h *harness) waitMounted(t *testing.T, uid, name, version string) asw.Volume {
	t.Helper()
	var v asw.Volume
	waitFor(t, fmt.Sprintf("%s/%s mounted at version %s", uid, name, version), func() bool {
		var ok bool
		v, ok = h.actualVolume(uid, name)
		return ok && v.State == asw.Mounted && v.Version == version
	})
	return v
}

func (h *harness) podDirs() []asw.PodDir { return h.actual.PodDirs() }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func mkdirAll(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	mkdirAll(t, filepath.Dir(path))
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
