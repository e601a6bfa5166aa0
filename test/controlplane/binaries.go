package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/volume-agent/volume-agent/test/internal/buildcache"
)

// buildFlags are passed to every `go build`. CGO_ENABLED=0 (set in the
// environment) needs no C toolchain on a clean machine and matches how
// Kubernetes ships its server binaries; -trimpath and -s -w only make the
// binaries smaller and the link faster. They are part of the cache key.
var buildFlags = []string{"-trimpath", "-buildvcs=false", "-ldflags=-s -w"}

// binary is one executable built from a helper module.
type binary struct {
	name   string // file name in the cache directory
	module string // helper module directory, relative to this package
	pkg    string // main package to build
}

var (
	etcdBinary              = binary{"etcd", "etcd", "go.etcd.io/etcd/server/v3"}
	apiserverBinary         = binary{"kube-apiserver", "kube", "k8s.io/kubernetes/cmd/kube-apiserver"}
	controllerManagerBinary = binary{"kube-controller-manager", "kube", "k8s.io/kubernetes/cmd/kube-controller-manager"}
	schedulerBinary         = binary{"kube-scheduler", "kube", "k8s.io/kubernetes/cmd/kube-scheduler"}
	kubeletBinary           = binary{"kubelet", "kube", "k8s.io/kubernetes/cmd/kubelet"}
)

// helperModules are hashed, in this order, into the cache key.
var helperModules = []string{"etcd", "kube"}

// Binaries makes sure etcd and kube-apiserver are built and returns the
// cache directory that holds them. Start builds kube-controller-manager and
// kube-scheduler into the same directory when its Options ask for them.
func Binaries(t testing.TB) (dir string) {
	t.Helper()
	return ensureBinaries(t, t.Logf, etcdBinary, apiserverBinary)
}

// Kubelet makes sure the kubelet (of the same Kubernetes version as
// kube-apiserver) is built, only when a test asks for it, and returns its
// path.
func Kubelet(t testing.TB) string {
	t.Helper()
	return filepath.Join(ensureBinaries(t, t.Logf, kubeletBinary), kubeletBinary.name)
}

// ensureBinaries returns the cache directory after making sure every wanted
// binary is in it. A warm cache costs a few stat calls: no lock, no go command.
func ensureBinaries(t testing.TB, logf func(string, ...any), want ...binary) string {
	t.Helper()
	src, err := sourceDir()
	if err != nil {
		t.Fatalf("controlplane: %v", err)
	}
	dir, err := cacheDir(src)
	if err != nil {
		t.Fatalf("controlplane: %v", err)
	}
	if len(buildcache.Missing(dir, names(want))) == 0 {
		return dir
	}
	ctx, cancel := buildcache.Context(t)
	defer cancel()
	err = buildcache.Fill(ctx, dir, names(want), logf, func(ctx context.Context, work string, todo []string) error {
		for _, group := range byModule(pick(want, todo)) {
			if err := build(ctx, work, filepath.Join(src, group[0].module), group, logf); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			t.Fatalf("controlplane: %v\nthe binaries were not built before the test deadline; "+
				"a cold build takes about 10 minutes on 2 cores: run go test with -timeout 30m "+
				"(the Go build cache keeps what was compiled so far)", err)
		}
		t.Fatalf("controlplane: %v", err)
	}
	return dir
}

// names returns the file names of bins.
func names(bins []binary) []string {
	var out []string
	for _, b := range bins {
		out = append(out, b.name)
	}
	return out
}

// pick returns the binaries of bins named in todo, keeping their order.
func pick(bins []binary, todo []string) []binary {
	var out []binary
	for _, b := range bins {
		if slices.Contains(todo, b.name) {
			out = append(out, b)
		}
	}
	return out
}

// byModule groups binaries by helper module, keeping their order, so each
// module is built with one `go build` that compiles shared packages once.
func byModule(bins []binary) [][]binary {
	var groups [][]binary
	index := map[string]int{}
	for _, b := range bins {
		i, ok := index[b.module]
		if !ok {
			i = len(groups)
			index[b.module] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], b)
	}
	return groups
}

// build runs `go build` in moduleDir for the binaries of one module, writing
// them into out. On failure the error carries the tail of the go command's
// output.
func build(ctx context.Context, out, moduleDir string, bins []binary, logf func(string, ...any)) error {
	args := append([]string{"build"}, buildFlags...)
	target := filepath.Join(out, bins[0].name)
	if len(bins) > 1 {
		target = out + string(filepath.Separator) // go build names each binary after its package
	}
	args = append(args, "-o", target)
	var names []string
	for _, b := range bins {
		args = append(args, b.pkg)
		names = append(names, b.name)
	}
	logf("controlplane: building %s in %s (cold builds take minutes)", strings.Join(names, ", "), moduleDir)
	start := time.Now()
	if _, err := buildcache.Go(ctx, moduleDir, args...); err != nil {
		return err
	}
	logf("controlplane: built %s in %s", strings.Join(names, ", "), time.Since(start).Round(time.Second))
	return nil
}

// cacheDir returns the cache directory for the current helper modules: in
// the test cache (buildcache.Root), a hash of the helper modules' go.mod and
// go.sum files, the build flags and the target platform.
func cacheDir(src string) (string, error) {
	var key bytes.Buffer
	fmt.Fprintf(&key, "%s/%s %q\n", runtime.GOOS, runtime.GOARCH, buildFlags)
	for _, m := range helperModules {
		for _, f := range []string{"go.mod", "go.sum"} {
			data, err := os.ReadFile(filepath.Join(src, m, f))
			if err != nil {
				return "", fmt.Errorf("hash helper module: %w", err)
			}
			fmt.Fprintf(&key, "%s/%s %d\n", m, f, len(data))
			key.Write(data)
		}
	}
	return buildcache.Dir("", key.Bytes())
}

// sourceDir returns the directory of this package's source, which holds the
// helper modules. It trusts the compiled-in file name when that exists
// (plain `go test`) and otherwise walks up from the working directory, which
// `go test` sets to a package directory inside the main module.
func sourceDir() (string, error) {
	const rel = "test/controlplane"
	if _, file, _, ok := runtime.Caller(0); ok {
		dir := filepath.Dir(file)
		if _, err := os.Stat(filepath.Join(dir, "kube", "go.mod")); err == nil {
			return dir, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find helper modules: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		cand := filepath.Join(dir, filepath.FromSlash(rel))
		if _, err := os.Stat(filepath.Join(cand, "kube", "go.mod")); err == nil {
			return cand, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("find helper modules: no %s/kube/go.mod above %s", rel, wd)
		}
	}
}
