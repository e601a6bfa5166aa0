package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/volume-agent/volume-agent/test/internal/buildcache"
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
	return buildcache.Dir("debian-", []byte(fmt.Sprintf("%s/%s %q", runtime.GOOS, runtime.GOARCH, debianPackages)))
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
	return buildcache.Locked(ctx, dir+".lock", logf, func() error {
		if complete(dir) {
			return nil
		}
		os.RemoveAll(dir) // an incomplete entry: never renamed into place by us, but be safe
		tmp, err := buildcache.WorkDir(dir, ".fetch-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		return fetch(ctx, tmp, dir, logf)
	})
}

// fetch downloads and unpacks the packages in tmp, then renames the result
// to dir.
func fetch(ctx context.Context, tmp, dir string, logf func(string, ...any)) error {
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
