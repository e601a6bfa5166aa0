package controlplane

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/volume-agent/volume-agent/test/internal/buildcache"
)

func TestCacheDirKeyedByHelperModules(t *testing.T) {
	src := t.TempDir()
	for _, m := range helperModules {
		if err := os.MkdirAll(filepath.Join(src, m), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"go.mod", "go.sum"} {
			if err := os.WriteFile(filepath.Join(src, m, f), []byte(m+" "+f+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	root := t.TempDir()
	t.Setenv(buildcache.Env, root)

	first, err := cacheDir(src)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(first) != root {
		t.Fatalf("cacheDir() = %q, want a directory in $%s=%q", first, buildcache.Env, root)
	}
	if again, _ := cacheDir(src); again != first {
		t.Fatalf("cacheDir() changed without a change to the helper modules: %q, then %q", first, again)
	}
	if err := os.WriteFile(filepath.Join(src, "kube", "go.sum"), []byte("bumped\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if bumped, _ := cacheDir(src); bumped == first {
		t.Fatalf("cacheDir() = %q after a go.sum change, want a new directory", bumped)
	}
}

func TestByModuleKeepsOrder(t *testing.T) {
	got := byModule([]binary{etcdBinary, apiserverBinary, controllerManagerBinary})
	want := [][]binary{{etcdBinary}, {apiserverBinary, controllerManagerBinary}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("byModule() = %v, want %v", got, want)
	}
}

func TestBinaryNamesMatchPackages(t *testing.T) {
	// build relies on this when it builds several binaries with one
	// `go build -o DIR/`, which names each after its package.
	for _, b := range []binary{apiserverBinary, controllerManagerBinary, schedulerBinary} {
		if filepath.Base(b.pkg) != b.name {
			t.Errorf("binary %q is built from %q, whose binary go build names %q", b.name, b.pkg, filepath.Base(b.pkg))
		}
	}
}
