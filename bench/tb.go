package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
)

// runner lets code written for tests (test/controlplane) run in this
// program: it is the part of testing.TB that code uses. Fatal stops the
// current scenario with a panic that run recovers (see fatal); Cleanup
// functions run, last first, when close is called.
type runner struct {
	testing.TB // nil: a method not defined below panics, which run reports

	ctx    context.Context
	cancel context.CancelFunc
	logf   func(format string, args ...any)

	mu       sync.Mutex
	cleanups []func()
	dirs     []string
	failed   bool
}

// fatal is the panic value of runner.Fatalf.
type fatal struct{ msg string }

func newRunner(logf func(string, ...any)) *runner {
	ctx, cancel := context.WithCancel(context.Background())
	return &runner{ctx: ctx, cancel: cancel, logf: logf}
}

func (r *runner) Helper()                    {}
func (r *runner) Name() string               { return "bench" }
func (r *runner) Context() context.Context   { return r.ctx }
func (r *runner) Logf(f string, args ...any) { r.logf(f, args...) }
func (r *runner) Log(args ...any)            { r.logf("%s", fmt.Sprint(args...)) }

func (r *runner) Errorf(f string, args ...any) {
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
	r.logf("error: "+f, args...)
}

func (r *runner) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *runner) Fatalf(f string, args ...any) {
	r.Errorf(f, args...)
	panic(fatal{fmt.Sprintf(f, args...)})
}

func (r *runner) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

// Skip and Skipf end the scenario: what a test may skip, a benchmark needs.
func (r *runner) Skip(args ...any)            { r.Fatalf("skipped: %s", fmt.Sprint(args...)) }
func (r *runner) Skipf(f string, args ...any) { r.Fatalf("skipped: "+f, args...) }

func (r *runner) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *runner) TempDir() string { return r.tempDirIn("") }

// tempDirIn is TempDir under parent ("" for the temporary directory).
func (r *runner) tempDirIn(parent string) string {
	dir, err := os.MkdirTemp(parent, "volume-agent-bench-")
	if err != nil {
		r.Fatalf("temporary directory: %v", err)
	}
	r.mu.Lock()
	r.dirs = append(r.dirs, dir)
	r.mu.Unlock()
	return dir
}

func (r *runner) Setenv(key, value string) {
	old, had := os.LookupEnv(key)
	_ = os.Setenv(key, value)
	r.Cleanup(func() {
		if had {
			_ = os.Setenv(key, old)
		} else {
			_ = os.Unsetenv(key)
		}
	})
}

// close runs the cleanups, last registered first, and removes the
// temporary directories.
func (r *runner) close() {
	r.cancel()
	r.mu.Lock()
	cleanups, dirs := r.cleanups, r.dirs
	r.cleanups, r.dirs = nil, nil
	r.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}
