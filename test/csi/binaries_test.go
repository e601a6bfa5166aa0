package csi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volume-agent/volume-agent/test/internal/buildcache"
)

func TestCacheDirKeyedByHelperModule(t *testing.T) {
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, helperModule), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(src, helperModule, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module m\n")
	write("go.sum", "")
	root := t.TempDir()
	t.Setenv(buildcache.Env, root)

	first, err := cacheDir(src)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(first) != root || !strings.HasPrefix(filepath.Base(first), "csi-") {
		t.Fatalf("cacheDir() = %q, want a csi-<hash> directory in $%s=%q", first, buildcache.Env, root)
	}
	if again, _ := cacheDir(src); again != first {
		t.Fatalf("cacheDir() changed without a change to the helper module: %q, then %q", first, again)
	}
	write("go.sum", "bumped\n")
	if bumped, _ := cacheDir(src); bumped == first {
		t.Fatalf("cacheDir() = %q after a go.sum change, want a new directory", bumped)
	}
}

func TestBinariesAreInTheHelperModule(t *testing.T) {
	// build links each binary with -X main.version=<version of b.Module>:
	// b.Pkg must belong to b.Module, and the helper module must name it.
	src, err := sourceDir()
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(src, helperModule, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range All {
		if !strings.HasPrefix(b.Pkg, b.Module+"/") || filepath.Base(b.Pkg) != b.Name {
			t.Errorf("binary %s: package %s is not %s/.../%s", b.Name, b.Pkg, b.Module, b.Name)
		}
		if !strings.Contains(string(gomod), "\t"+b.Pkg+"\n") {
			t.Errorf("binary %s: %s/go.mod has no tool %s", b.Name, helperModule, b.Pkg)
		}
	}
}
