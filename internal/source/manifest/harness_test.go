package manifest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	v1 "k8s.io/api/core/v1"
)

// within is how fast a change on disk must show.
const within = time.Second

// harness runs a Source on a directory and records its notifications and logs.
type harness struct {
	t       *testing.T
	dir     string
	src     *Source
	changes chan struct{}
	logs    *observer.ObservedLogs
}

// start runs a source on dir until the test ends, and waits for its first scan.
func start(t *testing.T, dir string, tweak ...func(*Config)) *harness {
	t.Helper()
	h := newHarness(t, dir, tweak...)
	h.run()
	return h
}

// newHarness creates a source on dir without running it.
func newHarness(t *testing.T, dir string, tweak ...func(*Config)) *harness {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	h := &harness{t: t, dir: dir, changes: make(chan struct{}, 1), logs: logs}
	cfg := Config{Dir: dir, NodeName: "node-1", Logger: zap.New(core), Resync: time.Hour, OnChange: h.notify}
	for _, f := range tweak {
		f(&cfg)
	}
	src, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.src = src
	return h
}

// run runs the source until the test ends, and waits for its first scan.
func (h *harness) run() {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.src.Run(ctx) }()
	h.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("Run returned %v, want nil", err)
		}
	})
	h.expect("first scan", func() bool { return h.src.Status().Reason != "initial scan not done" })
}

func (h *harness) notify() {
	select {
	case h.changes <- struct{}{}:
	default:
	}
}

// drain forgets notifications received so far.
func (h *harness) drain() {
	select {
	case <-h.changes:
	default:
	}
}

// expect waits, up to `within`, for an OnChange call after which cond holds.
func (h *harness) expect(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.After(within)
	for {
		select {
		case <-h.changes:
			if cond() {
				return
			}
		case <-deadline:
			h.t.Fatalf("%s: not observed through OnChange within %v; status %+v, pods %v",
				what, within, h.src.Status(), podNames(h.src.Pods()))
		}
	}
}

// scans returns how many rescans have completed.
func (h *harness) scans() int {
	return h.logs.FilterMessage("manifest directory scanned").Len()
}

// waitScan waits until more than n rescans have completed.
func (h *harness) waitScan(n int) {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for h.scans() <= n {
		if time.Now().After(deadline) {
			h.t.Fatalf("no rescan within %v", within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) write(name, content string) {
	h.t.Helper()
	h.drain()
	writeFile(h.t, h.dir, name, content)
}

// writeFile writes a file as if it had been written a while ago: a file
// written less than settleDelay before the source starts may be half
// written, and its content waits (see TestFreshFileAtStartWaitsToSettle).
func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	writeFresh(t, dir, name, content)
	old := time.Now().Add(-10 * settleDelay)
	if err := os.Chtimes(filepath.Join(dir, name), old, old); err != nil {
		t.Fatal(err)
	}
}

// writeFresh writes a file now.
func writeFresh(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func podNames(pods []*v1.Pod) []string {
	var names []string
	for _, p := range pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	return names
}

// pod returns a minimal pod manifest.
func pod(name, image string) string {
	return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
		"\nspec:\n  containers:\n  - {name: app, image: " + image + "}\n"
}
