package nfssubdir_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCloseUnmountsEveryExportAndLeftovers(t *testing.T) {
	f := &fakeExports{files: t.TempDir()}
	p, root := newProvisioner(t, f)
	mounts := filepath.Join(root, "plugins", "volume-agent.io~nfs-subdir", "mounts")
	if err := os.MkdirAll(filepath.Join(mounts, "left-by-a-crash"), 0o750); err != nil {
		t.Fatal(err)
	}
	for _, params := range []map[string]string{exportParams, {"server": "other", "path": "/e"}} {
		if _, err := p.Provision(context.Background(), request(class(params), claim(nil, nil))); err != nil {
			t.Fatal(err)
		}
	}
	dirs := names(t, mounts)
	if len(dirs) != 3 {
		t.Fatalf("mount directories %q: want two exports and the leftover", dirs)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var torn []string
	for _, call := range f.Calls() {
		if dir, ok := strings.CutPrefix(call, "teardown "+mounts+"/"); ok {
			torn = append(torn, dir)
		}
	}
	if slices.Sort(torn); !slices.Equal(torn, dirs) {
		t.Errorf("Close took down %q, want %q", torn, dirs)
	}
	if got := names(t, mounts); len(got) != 0 {
		t.Errorf("mount directories %q remain after Close", got)
	}

	if _, err := p.Provision(context.Background(), request(class(exportParams), claim(nil, nil))); err != nil {
		t.Fatalf("Provision after Close = %v, want the export mounted again", err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// names lists the entries of dir.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestCloseWithNothingMounted(t *testing.T) {
	p, _ := newProvisioner(t, &fakeExports{files: t.TempDir()})
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("Close before any mount = %v", err)
	}
}

// TestCloseWaitsForCallsInFlight closes the provisioner while a Provision
// has mounted its export and not yet used it: Close must wait for it, not
// take the mount down under it.
func TestCloseWaitsForCallsInFlight(t *testing.T) {
	f := &fakeExports{files: t.TempDir(), gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	p, _ := newProvisioner(t, f)
	provisioned := make(chan error, 1)
	go func() {
		_, err := p.Provision(context.Background(), request(class(exportParams), claim(nil, nil)))
		provisioned <- err
	}()
	<-f.entered
	closed := make(chan error, 1)
	go func() { closed <- p.Close(context.Background()) }()
	select {
	case err := <-closed:
		closed <- err
		t.Errorf("Close returned (%v) while a Provision was using the export", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(f.gate)
	if err := <-provisioned; err != nil {
		t.Errorf("Provision beside Close: %v", err)
	}
	if err := <-closed; err != nil {
		t.Error(err)
	}
	if got := names(t, f.files); !slices.Equal(got, []string{url.PathEscape("nfs.example:/exports/k8s") + ".unmounted"}) {
		t.Errorf("export files %q: want them provisioned, then unmounted by Close", got)
	}
}
