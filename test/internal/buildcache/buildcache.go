// Package buildcache holds what the test helpers that build or fetch
// programs once per machine share: where the cache lives, a lock that lets
// parallel test packages build once, a build context that ends before the
// test's deadline, and the go command run as they all run it.
package buildcache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/test/internal/proc"
)

// Env names the environment variable that overrides the cache root.
const Env = "VOLUME_AGENT_TEST_CACHE"

// Root returns $VOLUME_AGENT_TEST_CACHE, or $HOME/.cache/volume-agent-test.
func Root() (string, error) {
	if root := os.Getenv(Env); root != "" {
		return root, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the test cache: set $%s: %w", Env, err)
	}
	return filepath.Join(home, ".cache", "volume-agent-test"), nil
}

// Dir returns the cache entry named prefix followed by the first 16 hex
// digits of the SHA-256 of key: what was built and how, so that a change of
// version or flags builds into a new entry.
func Dir(prefix string, key []byte) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(key)
	return filepath.Join(root, prefix+hex.EncodeToString(h[:])[:16]), nil
}

// Locked runs fn while holding an exclusive flock on path: `go test ./...`
// runs packages in parallel, and several may want the same entry at once.
// fn must check again whether its work is done: whoever gets the lock
// second usually finds it so. Waiting polls, so that it ends with ctx, and
// is logged once through logf.
func Locked(ctx context.Context, path string, logf func(string, ...any), fn func() error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create the test cache: %w", err)
	}
	lock, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("open build lock: %w", err)
	}
	defer lock.Close() // closing the file releases the flock
	if err := flock(ctx, lock, logf); err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	return fn()
}

func flock(ctx context.Context, f *os.File, logf func(string, ...any)) error {
	ticker := time.NewTicker(lockPollInterval)
	defer ticker.Stop()
	for logged := false; ; logged = true {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return err
		}
		if !logged {
			logf("waiting for another test process to finish filling %s", strings.TrimSuffix(f.Name(), ".lock"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

// lockPollInterval is how often a waiting test retries the lock; the work
// it waits for takes minutes.
const lockPollInterval = time.Second

// WorkDir returns a new directory beside dir to build into, after removing
// those a builder that died left. Call it only while holding dir's lock:
// the leftovers are named after dir and so belong to that lock.
func WorkDir(dir, suffix string) (string, error) {
	stale, _ := filepath.Glob(dir + suffix + "*")
	for _, d := range stale {
		os.RemoveAll(d)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+suffix)
	if err != nil {
		return "", fmt.Errorf("create build directory: %w", err)
	}
	return tmp, nil
}

// Missing returns the names of want that are not regular files in dir
// yet. Fill renames a file into dir only once it is complete, so existing
// means usable.
func Missing(dir string, want []string) []string {
	var out []string
	for _, name := range want {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || !fi.Mode().IsRegular() {
			out = append(out, name)
		}
	}
	return out
}

// Fill makes sure every file of want is in the cache entry dir. Holding
// dir's lock, it calls build with a work directory and the names still
// missing, then renames what build made there into dir.
func Fill(ctx context.Context, dir string, want []string, logf func(string, ...any),
	build func(ctx context.Context, work string, todo []string) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create the cache entry %s: %w", dir, err)
	}
	return Locked(ctx, dir+".lock", logf, func() error {
		todo := Missing(dir, want)
		if len(todo) == 0 {
			return nil
		}
		work, err := WorkDir(dir, ".build-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(work)
		if err := build(ctx, work, todo); err != nil {
			return err
		}
		for _, name := range todo {
			if err := os.Rename(filepath.Join(work, name), filepath.Join(dir, name)); err != nil {
				return fmt.Errorf("move %s into the cache: %w", name, err)
			}
		}
		return nil
	})
}

// Context ends shortly before t's deadline, so that a build that cannot
// finish in time fails with a clear message instead of the test binary
// panicking in the middle of it.
func Context(t testing.TB) (context.Context, context.CancelFunc) {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok {
			return context.WithDeadline(context.Background(), deadline.Add(-deadlineMargin))
		}
	}
	return context.WithCancel(context.Background())
}

// deadlineMargin is left before the test deadline to report a build that
// did not finish.
const deadlineMargin = 30 * time.Second

// Go runs the go command in the helper module moduleDir and returns its
// standard output; on failure the error carries the tail of its output.
// CGO_ENABLED=0 needs no C toolchain on a clean machine and makes the
// static binaries images need; GOWORK=off keeps the helper module apart
// from any workspace.
func Go(ctx context.Context, moduleDir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	// The go command runs the compiler and linker as children: kill the
	// whole group when ctx ends. If the test binary dies, Pdeathsig kills
	// the go command and its children finish their current step and exit.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), moduleDir, err,
			proc.Tail(append(out, stderr.Bytes()...), 40))
	}
	return out, nil
}
