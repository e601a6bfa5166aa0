package buildcache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLockedExcludesASecondHolder(t *testing.T) {
	lock := filepath.Join(t.TempDir(), "entry.lock")
	held, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- Locked(context.Background(), lock, t.Logf, func() error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	var waited []string
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	ran := false
	err := Locked(ctx, lock, func(f string, a ...any) { waited = append(waited, f) }, func() error { ran = true; return nil })
	if !errors.Is(err, context.DeadlineExceeded) || ran {
		t.Fatalf("second Locked while the first holds the lock = %v (ran %v), want a deadline error and fn not run", err, ran)
	}
	if len(waited) != 1 || !strings.Contains(waited[0], "waiting for another test process") {
		t.Errorf("the wait was logged %q, want one line saying it waits", waited)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := Locked(context.Background(), lock, t.Logf, func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("Locked after release = %v (ran %v), want fn run", err, ran)
	}
}

func TestWorkDirRemovesWhatADeadBuilderLeft(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "entry")
	stale := dir + ".build-123"
	if err := os.MkdirAll(filepath.Join(stale, "half"), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := WorkDir(dir, ".build-")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale build directory %s still there (%v)", stale, err)
	}
	if filepath.Dir(tmp) != filepath.Dir(dir) || !strings.HasPrefix(filepath.Base(tmp), "entry.build-") {
		t.Errorf("WorkDir = %s, want entry.build-* beside %s", tmp, dir)
	}
}

func TestDirIsKeyedAndUnderTheRoot(t *testing.T) {
	root := t.TempDir()
	t.Setenv(Env, root)
	a, err := Dir("csi-", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Dir("csi-", []byte("two"))
	if a == b || filepath.Dir(a) != root || !strings.HasPrefix(filepath.Base(a), "csi-") || len(filepath.Base(a)) != len("csi-")+16 {
		t.Errorf("Dir = %s and %s, want two different csi-<16 hex> entries in %s", a, b, root)
	}
}
