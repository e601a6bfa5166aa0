package nfssubdir_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/nfssubdir"
	"github.com/volume-agent/volume-agent/internal/volume"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeExports stands for the NFS plugin: SetUp "mounts" an export by
// making the mount directory and reporting a t.TempDir() directory, one
// per export, as where the export's files are. It records every call.
type fakeExports struct {
	files string // one directory per export below
	err   error  // SetUp's error, when set
	hang  bool   // SetUp waits for its context to end
	// gate, when set, holds every SetUp after its mount until it closes;
	// entered gets a value as each one is held.
	gate, entered chan struct{}

	mu    sync.Mutex
	calls []string // guarded by mu
}

func (f *fakeExports) SetUp(ctx context.Context, spec *volume.Spec, dir string) (volume.Result, error) {
	nfs := spec.PV.Spec.NFS
	f.record("setup " + nfs.Server + ":" + nfs.Path + " [" + strings.Join(spec.PV.Spec.MountOptions, ",") + "] " + dir)
	if f.hang {
		<-ctx.Done()
		return volume.Result{}, ctx.Err()
	}
	if f.err != nil {
		return volume.Result{}, f.err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return volume.Result{}, err
	}
	files := f.exportDir(nfs.Server, nfs.Path)
	if err := os.Rename(files+".unmounted", files); err != nil && !os.IsNotExist(err) {
		return volume.Result{}, err
	}
	if err := os.MkdirAll(files, 0o755); err != nil {
		return volume.Result{}, err
	}
	if err := os.Symlink(files, filepath.Join(dir, "mounted")); err != nil && !os.IsExist(err) {
		return volume.Result{}, err
	}
	if f.gate != nil {
		f.entered <- struct{}{}
		<-f.gate
	}
	return volume.Result{Path: files}, nil
}

// TearDown "unmounts": the export's files are moved away until the next
// SetUp, as they vanish from a real mount point, so a call still using
// the mount fails.
func (f *fakeExports) TearDown(_ context.Context, dir string) error {
	f.record("teardown " + dir)
	files, err := os.Readlink(filepath.Join(dir, "mounted"))
	if err == nil {
		if err := os.Rename(files, files+".unmounted"); err != nil {
			return err
		}
		if err := os.Remove(filepath.Join(dir, "mounted")); err != nil {
			return err
		}
	}
	return os.Remove(dir)
}

// exportDir is where the files of export server:path are.
func (f *fakeExports) exportDir(server, path string) string {
	return filepath.Join(f.files, url.PathEscape(server+":"+path))
}

func (f *fakeExports) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeExports) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// newProvisioner is a provisioner on a fake NFS plugin, with its root
// directory.
func newProvisioner(t *testing.T, exports nfssubdir.ExportMounter) (*nfssubdir.Provisioner, string) {
	t.Helper()
	root := t.TempDir()
	p, err := nfssubdir.New(nfssubdir.Config{RootDir: root, Exports: exports})
	if err != nil {
		t.Fatal(err)
	}
	return p, root
}

func class(params map[string]string, options ...string) *storagev1.StorageClass {
	return &storagev1.StorageClass{
		ObjectMeta:   metav1.ObjectMeta{Name: "shared"},
		Provisioner:  provisioner.NFSSubdirName,
		Parameters:   params,
		MountOptions: options,
	}
}

func claim(labels, annotations map[string]string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Namespace: "team", Name: "data", UID: "u-1", Labels: labels, Annotations: annotations,
	}}
}

func request(c *storagev1.StorageClass, pvc *v1.PersistentVolumeClaim) provisioner.Request {
	return provisioner.Request{Claim: pvc, Class: c, PVName: provisioner.PVName(pvc)}
}

// tree lists every path below dir, relative to it.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(dir, p); rel != "." {
			paths = append(paths, rel)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return paths
}
