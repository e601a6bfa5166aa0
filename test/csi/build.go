package csi

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/volume-agent/volume-agent/test/internal/buildcache"
)

// buildFlags are passed to every `go build`, as test/controlplane passes
// them: CGO_ENABLED=0 (set in the environment) makes static binaries, which
// the images need (they hold nothing else) and which is how the upstream
// images ship them; -trimpath and -s -w make them smaller and the link
// faster. They are part of the cache key.
var buildFlags = []string{"-trimpath", "-buildvcs=false"}

// linkFlags are the linker flags; build adds -X main.version=<module
// version>, as the upstream release builds set it, so that --version
// reports the version that was built.
const linkFlags = "-s -w"

// build compiles the binaries of the helper module in moduleDir into out
// with one `go build`: the shared dependencies (client-go, grpc,
// protobuf...) are compiled once with all cores and each binary is linked
// once, in parallel, stamped with its module's version through a
// per-package -ldflags. go build names each binary after its package's
// last element, which is its Name (TestBinariesAreInTheHelperModule).
func build(ctx context.Context, out, moduleDir string, bins []Binary, logf func(string, ...any)) error {
	var names, pkgs []string
	for _, b := range bins {
		names = append(names, b.Name)
		pkgs = append(pkgs, b.Pkg)
	}
	logf("csi: building %s in %s (a cold build takes minutes)", strings.Join(names, ", "), moduleDir)
	start := time.Now()
	versions, err := moduleVersions(ctx, moduleDir, bins)
	if err != nil {
		return err
	}
	args := append([]string{"build"}, buildFlags...)
	for _, b := range bins {
		args = append(args, "-ldflags="+b.Pkg+"="+linkFlags+" -X main.version="+versions[b.Module])
	}
	args = append(args, "-o", out+string(filepath.Separator))
	if _, err := buildcache.Go(ctx, moduleDir, append(args, pkgs...)...); err != nil {
		return err
	}
	logf("csi: built %s in %s", strings.Join(names, ", "), time.Since(start).Round(time.Second))
	return nil
}

// moduleVersions returns the version the helper module selects of each
// binary's module.
func moduleVersions(ctx context.Context, moduleDir string, bins []Binary) (map[string]string, error) {
	args := []string{"list", "-m", "-f", "{{.Path}} {{.Version}}"}
	for _, b := range bins {
		args = append(args, b.Module)
	}
	out, err := buildcache.Go(ctx, moduleDir, args...)
	if err != nil {
		return nil, err
	}
	versions := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, version, ok := strings.Cut(line, " "); ok && version != "" {
			versions[path] = version
		}
	}
	for _, b := range bins {
		if versions[b.Module] == "" {
			return nil, fmt.Errorf("go list -m in %s: no version of %s:\n%s", moduleDir, b.Module, out)
		}
	}
	return versions, nil
}
