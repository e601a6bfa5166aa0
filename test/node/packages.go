package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/test/controlplane"
)

// debianPackages are what the node runs besides the kubelet: containerd
// (with ctr and containerd-shim-runc-v2), runc, and the CNI plugins.
var debianPackages = []string{"containerd", "runc", "containernetworking-plugins"}

// runtimeFiles is what a usable unpacked cache holds; paths relative to
// its root.
var runtimeFiles = []string{
	"usr/bin/containerd", "usr/bin/containerd-shim-runc-v2", "usr/bin/ctr",
	"usr/sbin/runc", "usr/lib/cni/loopback",
}

// runtimeRoot returns a directory holding debianPackages unpacked (dpkg -x)
// and fetches them with `apt-get download` the first time. The cache lives
// next to test/controlplane's binaries, keyed by the package names and the
// architecture: Debian's newer builds are not picked up until the entry is
// deleted. A warm cache costs a few stat calls.
func runtimeRoot(t testing.TB, logf func(string, ...any)) string {
	t.Helper()
	dir, err := packageCacheDir()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	if complete(dir) {
		return dir
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skipf("node: the test node takes containerd, runc and the CNI plugins from Debian's packages and needs apt-get: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := fetchLocked(ctx, dir, logf); err != nil {
		t.Fatalf("node: %v", err)
	}
	return dir
}

func packageCacheDir() (string, error) {
	root := os.Getenv(controlplane.CacheEnv)
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("find the package cache: set $%s: %w", controlplane.CacheEnv, err)
		}
		root = filepath.Join(home, ".cache", "volume-agent-test")
	}
	h := sha256.Sum256([]byte(fmt.Sprintf("%s/%s %q", runtime.GOOS, runtime.GOARCH, debianPackages)))
	return filepath.Join(root, "debian-"+hex.EncodeToString(h[:])[:16]), nil
}

func complete(dir string) bool {
	for _, f := range runtimeFiles {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return false
		}
	}
	return true
}

// fetchLocked downloads and unpacks the packages into a temporary directory
// renamed into place, under an flock so that parallel test packages fetch
// once.
func fetchLocked(ctx context.Context, dir string, logf func(string, ...any)) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("create package cache: %w", err)
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("open package lock: %w", err)
	}
	defer lock.Close() // releases the flock
	if err := flockWait(ctx, lock); err != nil {
		return fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	if complete(dir) {
		return nil
	}
	os.RemoveAll(dir) // an incomplete entry: never renamed into place by us, but be safe
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".fetch-")
	if err != nil {
		return fmt.Errorf("create fetch directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	logf("node: fetching %s with apt-get download", strings.Join(debianPackages, ", "))
	if err := download(ctx, tmp); err != nil {
		return err
	}
	root := filepath.Join(tmp, "root")
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	for _, deb := range debs {
		if out, err := exec.CommandContext(ctx, "dpkg", "-x", deb, root).CombinedOutput(); err != nil {
			return fmt.Errorf("dpkg -x %s: %w\n%s", deb, err, out)
		}
	}
	if !complete(root) {
		return fmt.Errorf("the packages %s unpacked into %s lack one of %s", debianPackages, root, runtimeFiles)
	}
	if err := os.Rename(root, dir); err != nil {
		return fmt.Errorf("move the packages into the cache: %w", err)
	}
	logf("node: fetched and unpacked the packages in %s", time.Since(start).Round(time.Second))
	return nil
}

// download runs `apt-get download` in dir. On a machine whose package lists
// were never fetched (a fresh container image) it runs `apt-get update`
// once and tries again.
func download(ctx context.Context, dir string) error {
	get := func() ([]byte, error) {
		cmd := exec.CommandContext(ctx, "apt-get", append([]string{"download", "-q"}, debianPackages...)...)
		cmd.Dir = dir
		return cmd.CombinedOutput()
	}
	out, err := get()
	if err == nil {
		return nil
	}
	if upd, uerr := exec.CommandContext(ctx, "apt-get", "update", "-q").CombinedOutput(); uerr != nil {
		return fmt.Errorf("apt-get download: %w\n%s\napt-get update: %w\n%s", err, out, uerr, upd)
	}
	if out, err = get(); err != nil {
		return fmt.Errorf("apt-get download %s: %w\n%s", debianPackages, err, out)
	}
	return nil
}

// flockWait takes an exclusive lock on f, polling so that it gives up when
// ctx ends.
func flockWait(ctx context.Context, f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
