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

func TestFillBuildsOnlyWhatIsMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "entry")
	var asked [][]string
	build := func(_ context.Context, work string, todo []string) error {
		asked = append(asked, todo)
		for _, name := range todo {
			if err := os.WriteFile(filepath.Join(work, name), []byte(name), 0o755); err != nil {
				return err
			}
		}
		return nil
	}
	if err := Fill(context.Background(), dir, []string{"a"}, t.Logf, build); err != nil {
		t.Fatal(err)
	}
	if err := Fill(context.Background(), dir, []string{"a", "b"}, t.Logf, build); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 2 || strings.Join(asked[0], ",") != "a" || strings.Join(asked[1], ",") != "b" {
		t.Errorf("build was asked for %q, want [a] then [b]", asked)
	}
	if m := Missing(dir, []string{"a", "b"}); len(m) != 0 {
		t.Errorf("Missing after Fill = %q, want none", m)
	}
	failed := errors.New("compile error")
	err := Fill(context.Background(), dir, []string{"c"}, t.Logf, func(context.Context, string, []string) error { return failed })
	if !errors.Is(err, failed) {
		t.Errorf("Fill with a failing build = %v, want its error", err)
	}
	if m := Missing(dir, []string{"c"}); len(m) != 1 {
		t.Errorf("a failed build left %q in the entry", "c")
	}
}
