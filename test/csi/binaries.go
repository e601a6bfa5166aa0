package csi

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/volume-agent/volume-agent/test/internal/buildcache"
)

// Binary is one upstream program of the CSI ecosystem, built from the
// helper module.
type Binary struct {
	Name   string // file name in the cache, image name and entrypoint
	Module string // the Go module that holds it; its version is the program's
	Pkg    string // main package
}

// The programs, at the versions the helper module requires.
var (
	Provisioner = Binary{"csi-provisioner", "github.com/kubernetes-csi/external-provisioner/v6",
		"github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"}
	Resizer = Binary{"csi-resizer", "github.com/kubernetes-csi/external-resizer/v2",
		"github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer"}
	Snapshotter = Binary{"csi-snapshotter", "github.com/kubernetes-csi/external-snapshotter/v8",
		"github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter"}
	SnapshotController = Binary{"snapshot-controller", "github.com/kubernetes-csi/external-snapshotter/v8",
		"github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller"}
)

// All is every program the helper module builds, in build order.
var All = []Binary{Provisioner, Resizer, Snapshotter, SnapshotController}

// helperModule is the directory, relative to this package, of the module
// that requires the programs.
const helperModule = "sidecars"

// Binaries makes sure every program of All is built and returns the cache
// directory that holds them, each under its Name. The first test to ask
// builds all four (a cold build takes minutes); a warm cache costs a few
// stat calls: no lock, no go command.
func Binaries(t testing.TB) (dir string) {
	t.Helper()
	src, err := sourceDir()
	if err != nil {
		t.Fatalf("csi: %v", err)
	}
	dir, err = cacheDir(src)
	if err != nil {
		t.Fatalf("csi: %v", err)
	}
	if len(buildcache.Missing(dir, names(All))) == 0 {
		return dir
	}
	ctx, cancel := buildcache.Context(t)
	defer cancel()
	err = buildcache.Fill(ctx, dir, names(All), t.Logf, func(ctx context.Context, work string, todo []string) error {
		return build(ctx, work, filepath.Join(src, helperModule), pick(All, todo), t.Logf)
	})
	if err != nil {
		if ctx.Err() != nil {
			t.Fatalf("csi: %v\nthe CSI sidecars were not built before the test deadline; "+
				"a cold build takes about 8 minutes on 2 cores (800-900 CPU seconds): run go test with -timeout 30m "+
				"(the Go build cache keeps what was compiled so far)", err)
		}
		t.Fatalf("csi: %v", err)
	}
	return dir
}

// Path returns the path of b, built if it was not.
func Path(t testing.TB, b Binary) string {
	t.Helper()
	return filepath.Join(Binaries(t), b.Name)
}

// names returns the file names of bins.
func names(bins []Binary) []string {
	var out []string
	for _, b := range bins {
		out = append(out, b.Name)
	}
	return out
}

// pick returns the binaries of bins named in todo, keeping their order.
func pick(bins []Binary, todo []string) []Binary {
	var out []Binary
	for _, b := range bins {
		if slices.Contains(todo, b.Name) {
			out = append(out, b)
		}
	}
	return out
}

// cacheDir returns the cache directory for the current helper module: in
// the test cache (buildcache.Root), "csi-" and a hash of the helper
// module's go.mod and go.sum, the build flags and the target platform, so
// that a version bump builds into a new directory.
func cacheDir(src string) (string, error) {
	var key bytes.Buffer
	fmt.Fprintf(&key, "%s/%s %q %q\n", runtime.GOOS, runtime.GOARCH, buildFlags, linkFlags)
	for _, f := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(src, helperModule, f))
		if err != nil {
			return "", fmt.Errorf("hash helper module: %w", err)
		}
		fmt.Fprintf(&key, "%s %d\n", f, len(data))
		key.Write(data)
	}
	return buildcache.Dir("csi-", key.Bytes())
}

// sourceDir returns the directory of this package's source, which holds the
// helper module. It trusts the compiled-in file name when that exists
// (plain `go test`) and otherwise walks up from the working directory, which
// `go test` sets to a package directory inside the main module.
func sourceDir() (string, error) {
	const rel = "test/csi"
	if _, file, _, ok := runtime.Caller(0); ok {
		dir := filepath.Dir(file)
		if _, err := os.Stat(filepath.Join(dir, helperModule, "go.mod")); err == nil {
			return dir, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find the helper module: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		cand := filepath.Join(dir, filepath.FromSlash(rel))
		if _, err := os.Stat(filepath.Join(cand, helperModule, "go.mod")); err == nil {
			return cand, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("find the helper module: no %s/%s/go.mod above %s", rel, helperModule, wd)
		}
	}
}
