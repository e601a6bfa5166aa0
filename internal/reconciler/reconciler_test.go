package reconciler

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/layout"
)

func TestRunMountsDesiredVolumes(t *testing.T) {
	h := newHarness(t, nil)
	h.desired.SetPod(desiredPod("p1", desiredVolume("a", "1"), desiredVolume("b", "1")))
	h.desired.MarkPopulated()
	h.start(t)

	for _, name := range []string{"a", "b"} {
		v := h.waitMounted(t, "p1", name, "1")
		want := asw.Volume{PodUID: "p1", Name: name, Plugin: testPlugin, Dir: h.volumeDir("p1", name), Path: h.volumeDir("p1", name), State: asw.Mounted, Version: "1",
			Access: asw.ReadWrite}
		if v != want {
			t.Errorf("actual = %+v\nwant %+v", v, want)
		}
		if !exists(v.Dir) {
			t.Errorf("%s was not created", v.Dir)
		}
	}
	if !h.r.Recovered() {
		t.Error("Recovered is false while reconciling")
	}
	time.Sleep(50 * time.Millisecond) // let any spurious pass happen
	if got := h.plugin.callsOf("setup"); !slices.Equal(got, []string{"setup p1/a", "setup p1/b"}) && !slices.Equal(got, []string{"setup p1/b", "setup p1/a"}) {
		t.Errorf("set-ups = %v; want each volume set up once", got)
	}
	if got := h.plugin.callsOf("teardown"); len(got) != 0 {
		t.Errorf("teardowns = %v", got)
	}
	if !h.observer.saw(testPlugin + " setup success") {
		t.Error("set-up not observed")
	}
	if dirs := h.podDirs(); !slices.Equal(dirs, []asw.PodDir{{UID: "p1", Namespace: "ns", Name: "p1", Source: "test"}}) {
		t.Errorf("pod dirs = %+v", dirs)
	}
}

func TestRunRefreshesWhenTheVersionChanges(t *testing.T) {
	h := newHarness(t, nil)
	h.desired.SetPod(desiredPod("p1", desiredVolume("cfg", "1")))
	h.desired.MarkPopulated()
	h.start(t)
	h.waitMounted(t, "p1", "cfg", "1")

	h.desired.SetPod(desiredPod("p1", desiredVolume("cfg", "2")))
	h.waitMounted(t, "p1", "cfg", "2")
	if got := h.plugin.callsOf("setup"); len(got) != 2 {
		t.Errorf("set-ups = %v; want the first set-up and one refresh", got)
	}
	if !h.observer.saw(testPlugin + " refresh success") {
		t.Error("refresh not observed as a refresh")
	}
	if got := h.plugin.callsOf("teardown"); len(got) != 0 {
		t.Errorf("a refresh tore the volume down: %v", got)
	}
}

func TestRunTearsDownARemovedPod(t *testing.T) {
	tests := []struct {
		name    string
		foreign bool // put another plugin's volume with a file in the pod directory
	}{
		{"empty pod directory is removed", false},
		{"content the agent did not create is left alone", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.desired.SetPod(desiredPod("p1", desiredVolume("a", "1")))
			h.desired.SetPod(desiredPod("p2", desiredVolume("a", "1")))
			h.desired.MarkPopulated()
			h.start(t)
			h.waitMounted(t, "p1", "a", "1")
			h.waitMounted(t, "p2", "a", "1")
			foreign := filepath.Join(h.root.VolumeDir("p1", "a.io/unknown", "x"), "data")
			if tt.foreign {
				writeFile(t, foreign, "keep me")
			}

			h.desired.DeletePod("p1")
			waitFor(t, "the pod directory to be forgotten", func() bool {
				return slices.Equal(h.podDirs(), []asw.PodDir{{UID: "p2", Namespace: "ns", Name: "p2", Source: "test"}})
			})
			if got := h.plugin.callsOf("teardown"); !slices.Equal(got, []string{"teardown p1/a"}) {
				t.Fatalf("teardowns = %v", got)
			}
			if _, ok := h.actualVolume("p1", "a"); ok {
				t.Fatal("torn-down volume still in the actual state")
			}
			if exists(h.root.PluginDir("p1", testPlugin)) {
				t.Error("the empty plugin directory was left behind")
			}
			if tt.foreign {
				if !exists(foreign) {
					t.Fatal("cleanup removed content the agent did not create")
				}
			} else if exists(h.root.PodDir("p1")) {
				t.Fatal("empty pod directory not removed")
			}
			if !exists(h.volumeDir("p2", "a")) {
				t.Fatal("another pod's volume was touched")
			}
			if !h.observer.saw(" cleanup success") {
				t.Error("cleanup not observed in the metrics")
			}
		})
	}
}

func TestRunRecordsFailuresAndRetriesAfterBackoff(t *testing.T) {
	const backoff = 40 * time.Millisecond
	h := newHarness(t, func(c *Config) {
		c.Executor.InitialBackoff, c.Executor.MaxBackoff = backoff, 2*backoff
	})
	h.plugin.set(func(p *fakePlugin) { p.fail = errInjected })
	key := dsw.Key{PodUID: "p1", Volume: "a"}
	h.desired.SetPod(desiredPod("p1", desiredVolume("a", "1")))
	h.desired.MarkPopulated()
	h.start(t)

	waitFor(t, "the error in the desired state", func() bool { return h.desired.Error(key) == errInjected.Error() })
	waitFor(t, "three attempts", func() bool { return len(h.plugin.setUpTimes()) >= 3 })
	h.plugin.set(func(p *fakePlugin) { p.fail = nil })
	times := h.plugin.setUpTimes()
	for i, want := range []time.Duration{backoff, 2 * backoff} {
		if gap := times[i+1].Sub(times[i]); gap < want {
			t.Errorf("attempt %d came %v after attempt %d; want at least the backoff %v", i+2, gap, i+1, want)
		}
	}
	if _, ok := h.actualVolume("p1", "a"); ok {
		t.Error("a failed set-up is in the actual state")
	}
	if !h.observer.saw(testPlugin + " setup error") {
		t.Error("failure not observed")
	}

	h.waitMounted(t, "p1", "a", "1")
	waitFor(t, "the error to be cleared", func() bool { return h.desired.Error(key) == "" })
}

func TestRunSetUpTimeout(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Executor.Timeout = 30 * time.Millisecond })
	h.plugin.set(func(p *fakePlugin) { p.blockCtx = true })
	key := dsw.Key{PodUID: "p1", Volume: "a"}
	h.desired.SetPod(desiredPod("p1", desiredVolume("a", "1")))
	h.desired.MarkPopulated()
	h.start(t)

	waitFor(t, "the volume to be uncertain", func() bool {
		v, ok := h.actualVolume("p1", "a")
		return ok && v.State == asw.Uncertain
	})
	if v, _ := h.actualVolume("p1", "a"); v.Version != "" || v.Reconstructed || v.Dir != h.volumeDir("p1", "a") {
		t.Errorf("uncertain volume = %+v", v)
	}
	if msg := h.desired.Error(key); !strings.Contains(msg, "deadline exceeded") {
		t.Errorf("error = %q, want a deadline", msg)
	}
	if !h.observer.saw(testPlugin + " setup timeout") {
		t.Error("timeout not observed as a timeout")
	}

	h.plugin.set(func(p *fakePlugin) { p.blockCtx = false })
	h.waitMounted(t, "p1", "a", "1")
}

func TestRunRefreshTimeoutKeepsTheVolumeMounted(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Executor.Timeout = 30 * time.Millisecond })
	key := dsw.Key{PodUID: "p1", Volume: "a"}
	h.desired.SetPod(desiredPod("p1", desiredVolume("a", "1")))
	h.desired.MarkPopulated()
	h.start(t)
	h.waitMounted(t, "p1", "a", "1")

	h.plugin.set(func(p *fakePlugin) { p.blockCtx = true })
	h.desired.SetPod(desiredPod("p1", desiredVolume("a", "2")))
	waitFor(t, "the refresh error", func() bool { return h.desired.Error(key) != "" })
	if v, _ := h.actualVolume("p1", "a"); v.State != asw.Mounted || v.Version != "1" {
		t.Fatalf("after a timed-out refresh the volume is %+v; want Mounted with the old content", v)
	}
	h.plugin.set(func(p *fakePlugin) { p.blockCtx = false })
	h.waitMounted(t, "p1", "a", "2")
}

func TestRunReconstructs(t *testing.T) {
	h := newHarness(t, nil)
	orphan, wanted := h.volumeDir("orphan", "v"), h.volumeDir("wanted", "v")
	foreign := filepath.Join(h.root.VolumeDir("foreign", "a.io/unknown", "x"), "data")
	mkdirAll(t, orphan)
	mkdirAll(t, wanted)
	writeFile(t, foreign, "keep me")
	h.desired.SetPod(desiredPod("wanted", desiredVolume("v", "1")))
	h.start(t)

	// Not populated: the wanted volume is set up again; nothing is torn down.
	h.waitMounted(t, "wanted", "v", "1")
	time.Sleep(50 * time.Millisecond)
	if got := h.plugin.callsOf("teardown"); len(got) != 0 {
		t.Fatalf("tore down %v before the desired state was populated", got)
	}
	v, ok := h.actualVolume("orphan", "v")
	if want := (asw.Volume{PodUID: "orphan", Name: "v", Plugin: testPlugin, Dir: orphan, Path: orphan, State: asw.Uncertain, Reconstructed: true}); !ok || v != want {
		t.Fatalf("reconstructed volume = %+v, %v; want %+v", v, ok, want)
	}
	wantDirs := []asw.PodDir{{UID: "foreign", Reconstructed: true}, {UID: "orphan", Reconstructed: true}, {UID: "wanted", Namespace: "ns", Name: "wanted", Source: "test"}}
	if got := h.podDirs(); !slices.Equal(got, wantDirs) {
		t.Fatalf("pod dirs = %+v, want %+v", got, wantDirs)
	}
	if _, ok := h.actualVolume("foreign", "x"); ok {
		t.Fatal("a volume of an unknown plugin was taken into the actual state")
	}
	if !exists(orphan) {
		t.Fatal("orphan removed before the desired state was populated")
	}

	// Populated, but the orphan's removal does not count yet (its source
	// has not said so): nothing is torn down.
	h.desired.MarkPopulated()
	time.Sleep(50 * time.Millisecond)
	if got := h.plugin.callsOf("teardown"); len(got) != 0 {
		t.Fatalf("tore down %v before the removal of its pod counted", got)
	}

	// Removed: the orphan goes; the wanted volume and foreign content stay.
	h.desired.MarkRemoved("orphan")
	h.desired.MarkRemoved("foreign")
	waitFor(t, "orphan and foreign pod directories to be forgotten", func() bool {
		return slices.Equal(h.podDirs(), []asw.PodDir{{UID: "wanted", Namespace: "ns", Name: "wanted", Source: "test"}})
	})
	if got := h.plugin.callsOf("teardown"); !slices.Equal(got, []string{"teardown orphan/v"}) {
		t.Fatalf("teardowns = %v; want only the orphan", got)
	}
	if got := h.plugin.callsOf("setup"); !slices.Equal(got, []string{"setup wanted/v"}) {
		t.Fatalf("set-ups = %v; want the wanted volume set up again once", got)
	}
	if exists(h.root.PodDir("orphan")) {
		t.Fatal("orphan pod directory not removed")
	}
	if !exists(foreign) {
		t.Fatal("content of an unknown plugin was removed")
	}
	if !exists(wanted) {
		t.Fatal("wanted volume removed")
	}
}

func TestRunShutdownWaitsAtMostTheGrace(t *testing.T) {
	const grace = 100 * time.Millisecond
	h := newHarness(t, func(c *Config) { c.ShutdownGrace = grace })
	h.desired.SetPod(desiredPod("p1", desiredVolume("a", "1")))
	h.desired.MarkPopulated()
	h.start(t)
	h.waitMounted(t, "p1", "a", "1")

	release := make(chan struct{})
	h.plugin.set(func(p *fakePlugin) { p.release = release })
	h.desired.SetPod(desiredPod("p2", desiredVolume("b", "1")))
	waitFor(t, "the set-up of p2/b to start", func() bool {
		return slices.Contains(h.plugin.callsOf("setup"), "setup p2/b")
	})

	start := time.Now()
	h.cancel()
	h.desired.DeletePod("p1") // a change after shutdown began starts nothing
	var err error
	select {
	case err = <-h.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	h.cancel = nil
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if elapsed < grace || elapsed > grace+2*time.Second {
		t.Fatalf("Run returned after %v; want the grace period %v", elapsed, grace)
	}
	if got := h.plugin.callsOf("teardown"); len(got) != 0 {
		t.Fatalf("shutdown tore down %v", got)
	}
	if !exists(h.volumeDir("p1", "a")) {
		t.Fatal("a mounted volume was removed at shutdown")
	}
	close(release) // the abandoned operation ends; the leak check then passes
	h.waitMounted(t, "p2", "b", "1")
}

func TestRunWithCancelledContextStartsNothing(t *testing.T) {
	h := newHarness(t, nil)
	mkdirAll(t, h.volumeDir("orphan", "v"))
	h.desired.SetPod(desiredPod("p1", desiredVolume("a", "1")))
	h.desired.MarkPopulated()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.r.Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if got := append(h.plugin.callsOf("setup"), h.plugin.callsOf("teardown")...); len(got) != 0 {
		t.Fatalf("operations started after the context ended: %v", got)
	}
}

func TestRemovePodDir(t *testing.T) {
	setup := func(t *testing.T) (layout.Root, action, string) {
		root := layout.Root(t.TempDir())
		return root, action{kind: opCleanup, pod: "p"}, root.PodDir("p")
	}
	t.Run("missing directory", func(t *testing.T) {
		root, a, _ := setup(t)
		if err := removePodDir(root, a); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("owned levels of empty directories", func(t *testing.T) {
		root, a, dir := setup(t)
		mkdirAll(t, filepath.Join(dir, "volumes", "a~b", "v1"))
		mkdirAll(t, filepath.Join(dir, "volumes", "a~b", "v2"))
		mkdirAll(t, filepath.Join(dir, "volumes", "a~c"))
		if err := removePodDir(root, a); err != nil {
			t.Fatal(err)
		}
		if exists(dir) {
			t.Fatal("empty pod directory not removed")
		}
	})
	t.Run("volumeDevices/ left empty", func(t *testing.T) {
		root, a, dir := setup(t)
		mkdirAll(t, filepath.Join(dir, "volumes", "a~b"))
		mkdirAll(t, filepath.Join(dir, "volumeDevices", "a~b"))
		mkdirAll(t, filepath.Join(dir, "volumeDevices", "a~c"))
		if err := removePodDir(root, a); err != nil {
			t.Fatal(err)
		}
		if exists(dir) {
			t.Fatal("pod directory with empty volumeDevices/ not removed")
		}
	})
	t.Run("a device left stops volumeDevices/ only", func(t *testing.T) {
		root, a, dir := setup(t)
		writeFile(t, filepath.Join(dir, "volumeDevices", "a~b", "dev"), "")
		mkdirAll(t, filepath.Join(dir, "volumeDevices", "a~c"))
		mkdirAll(t, filepath.Join(dir, "volumes", "a~b", "v"))
		if err := removePodDir(root, a); !isNotEmpty(err) {
			t.Fatalf("removePodDir = %v, want ENOTEMPTY", err)
		}
		if !exists(filepath.Join(dir, "volumeDevices", "a~b", "dev")) {
			t.Fatal("a published device was removed")
		}
		if exists(filepath.Join(dir, "volumeDevices", "a~c")) || exists(filepath.Join(dir, "volumes")) {
			t.Error("empty directories were left beside the device")
		}
	})
	t.Run("never enters a volume directory", func(t *testing.T) {
		root, a, dir := setup(t)
		inside := filepath.Join(dir, "volumes", "a~nfs", "v", "keep-empty")
		mkdirAll(t, inside) // e.g. an empty directory on a still-mounted share
		mkdirAll(t, filepath.Join(dir, "volumes", "a~a", "v"))
		if err := removePodDir(root, a); !isNotEmpty(err) {
			t.Fatalf("removePodDir = %v, want ENOTEMPTY", err)
		}
		if !exists(inside) {
			t.Fatal("an empty directory inside a volume was removed")
		}
		if exists(filepath.Join(dir, "volumes", "a~a")) {
			t.Error("an empty plugin directory was left behind")
		}
	})
	t.Run("a foreign file at the pod level stays", func(t *testing.T) {
		root, a, dir := setup(t)
		writeFile(t, filepath.Join(dir, "etc-hosts"), "keep me")
		if err := removePodDir(root, a); !isNotEmpty(err) {
			t.Fatalf("removePodDir = %v, want ENOTEMPTY", err)
		}
		if !exists(filepath.Join(dir, "etc-hosts")) {
			t.Fatal("a foreign file was removed")
		}
	})
	t.Run("symlinks are not followed", func(t *testing.T) {
		root, a, dir := setup(t)
		outside := t.TempDir()
		emptyOutside := filepath.Join(outside, "empty")
		mkdirAll(t, emptyOutside)
		mkdirAll(t, filepath.Join(dir, "volumes"))
		symlink(t, emptyOutside, filepath.Join(dir, "volumes", "to-empty"))
		if err := removePodDir(root, a); !isNotEmpty(err) {
			t.Fatalf("removePodDir = %v, want ENOTEMPTY", err)
		}
		if !exists(emptyOutside) || !exists(filepath.Join(dir, "volumes", "to-empty")) {
			t.Fatal("removePodDir followed or removed a symlink")
		}
	})
}

func TestReconstructedPodDirClearedByASetUp(t *testing.T) {
	h := newHarness(t, nil)
	mkdirAll(t, h.volumeDir("p1", "a"))
	h.desired.SetPod(desiredPod("p1", desiredVolume("a", "1")))
	h.start(t)
	h.waitMounted(t, "p1", "a", "1")
	if got := h.podDirs(); !slices.Equal(got, []asw.PodDir{{UID: types.UID("p1"), Namespace: "ns", Name: "p1", Source: "test"}}) {
		t.Fatalf("pod dirs = %+v; a set-up must clear Reconstructed", got)
	}
}

func TestRunFailsWhenTheRootCannotBeScanned(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Root = layout.Root(filepath.Join(t.TempDir(), strings.Repeat("x", 300))) })
	if err := h.r.Run(context.Background()); err == nil {
		t.Fatal("Run succeeded without knowing what is mounted")
	}
	if h.r.Recovered() {
		t.Fatal("Recovered after a failed reconstruction")
	}
}

// A pass may take its snapshot just before an operation on the same volume
// completes and start its own action just after: that action must not run.
func TestOperationsSkipStaleSnapshots(t *testing.T) {
	h := newHarness(t, nil)
	key := dsw.Key{PodUID: "p1", Volume: "a"}
	mounted := asw.Volume{PodUID: "p1", Name: "a", Plugin: testPlugin, Dir: h.volumeDir("p1", "a"), Path: h.volumeDir("p1", "a"), State: asw.Mounted, Version: "1",
		Access: asw.ReadWrite}
	setUp := action{kind: opSetUp, pod: "p1", volume: "a", plugin: testPlugin, desired: desiredVolume("a", "1")}
	tearDown := action{kind: opTearDown, pod: "p1", volume: "a", plugin: testPlugin, actual: mounted}
	run := func(a action) {
		t.Helper()
		if err := h.r.operation(a)(context.Background()); err != nil {
			t.Fatalf("%s: %v", a.kind, err)
		}
	}

	h.actual.Set(mounted) // set up since the snapshot that planned setUp
	run(setUp)
	if got := h.plugin.callsOf("setup"); len(got) != 0 {
		t.Fatalf("a set-up planned on a stale snapshot ran: %v", got)
	}
	h.actual.Delete(key) // torn down since the snapshot that planned tearDown
	run(tearDown)
	if got := h.plugin.callsOf("teardown"); len(got) != 0 {
		t.Fatalf("a teardown planned on a stale snapshot ran: %v", got)
	}

	run(setUp) // the snapshot is current again
	if v, _ := h.actual.Get(key); v != mounted {
		t.Fatalf("after set-up: %+v", v)
	}
	run(tearDown)
	if _, ok := h.actual.Get(key); ok || len(h.plugin.callsOf("setup")) != 1 || len(h.plugin.callsOf("teardown")) != 1 {
		t.Fatalf("current actions did not run: %v %v", h.plugin.callsOf("setup"), h.plugin.callsOf("teardown"))
	}
}

func TestCleanupSkipsAPodInUseAgain(t *testing.T) {
	h := newHarness(t, nil)
	cleanup := action{kind: opCleanup, pod: "p1"}
	// The pod came back, and its volume was set up again, after the pass
	// that planned the cleanup.
	h.desired.SetPod(desiredPod("p1", desiredVolume("a", "1")))
	mkdirAll(t, h.volumeDir("p1", "a"))
	h.actual.Set(asw.Volume{PodUID: "p1", Name: "a", Plugin: testPlugin, Dir: h.volumeDir("p1", "a"), State: asw.Mounted, Version: "1"})
	if err := h.r.operation(cleanup)(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !exists(h.volumeDir("p1", "a")) {
		t.Fatal("cleanup removed the directory of a volume set up again")
	}
	if got := h.podDirs(); len(got) != 1 {
		t.Fatalf("pod directories %v, want p1 still tracked", got)
	}
}
