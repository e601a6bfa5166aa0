package nfssubdir_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/nfssubdir"
)

// provisioned provisions a claim of a class with params, writes a file in
// its subdirectory, and returns the PV, the export's files and the rel.
func provisioned(t *testing.T, p *nfssubdir.Provisioner, f *fakeExports, params map[string]string) (*v1.PersistentVolume, string) {
	t.Helper()
	req := request(class(params, "hard"), claim(nil, nil))
	vol, err := p.Provision(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	files := f.exportDir(params["server"], params["path"])
	dir := filepath.Join(files, vol.Annotations[nfssubdir.AnnSubdir])
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	return provisioner.NewPV(req, provisioner.NFSSubdirName, vol), files
}

func TestDeleteRemoves(t *testing.T) {
	f := &fakeExports{files: t.TempDir()}
	p, _ := newProvisioner(t, f)
	pv, files := provisioned(t, p, f, exportParams)
	if err := os.WriteFile(filepath.Join(files, "neighbour"), []byte("y"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(context.Background(), pv); err != nil {
		t.Fatal(err)
	}
	if got := tree(t, files); !slices.Equal(got, []string{"neighbour"}) {
		t.Fatalf("export holds %q after Delete, want only the neighbour", got)
	}
	if err := p.Delete(context.Background(), pv); err != nil {
		t.Fatalf("Delete of a subdirectory gone already = %v, want success", err)
	}
	for _, call := range f.Calls() {
		if !strings.Contains(call, "[hard]") {
			t.Errorf("mount call %q: want the PV's mount options", call)
		}
	}
}

func TestDeleteArchives(t *testing.T) {
	f := &fakeExports{files: t.TempDir()}
	p, _ := newProvisioner(t, f)
	params := map[string]string{"server": "s", "path": "/e", "archiveOnDelete": "True", "pathPattern": "${.PVC.namespace}/${.PVC.name}"}
	pv, files := provisioned(t, p, f, params)
	if pv.Annotations[provisioner.AnnArchiveOnDelete] != "true" {
		t.Fatalf("PV annotations %v: want archive-on-delete recorded", pv.Annotations)
	}
	if err := p.Delete(context.Background(), pv); err != nil {
		t.Fatal(err)
	}
	archive := ".archived/archived-team-data-" + pv.Name
	if got := tree(t, files); !slices.Equal(got, []string{".archived", archive, archive + "/data", "team"}) {
		t.Fatalf("export holds %q after Delete, want the subdirectory archived with its file in .archived", got)
	}
	if info, err := os.Stat(filepath.Join(files, ".archived")); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf(".archived: %v, %v; want mode 0700", info, err)
	}
	if err := p.Delete(context.Background(), pv); err != nil {
		t.Fatalf("archive of a subdirectory gone already = %v, want success", err)
	}
}

func TestDeleteRefusesForgedPVs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		forge   func(pv *v1.PersistentVolume)
		wantErr string
	}{
		{"another provisioner's", func(pv *v1.PersistentVolume) { pv.Annotations[provisioner.AnnProvisionedBy] = provisioner.LocalName }, "provisioned-by"},
		{"no export", func(pv *v1.PersistentVolume) { delete(pv.Annotations, nfssubdir.AnnExport) }, nfssubdir.AnnExport},
		{"export that is no export", func(pv *v1.PersistentVolume) { pv.Annotations[nfssubdir.AnnExport] = "s" }, nfssubdir.AnnExport},
		{"no subdirectory", func(pv *v1.PersistentVolume) { delete(pv.Annotations, nfssubdir.AnnSubdir) }, nfssubdir.AnnSubdir},
		{"the export itself", func(pv *v1.PersistentVolume) {
			pv.Annotations[nfssubdir.AnnSubdir] = "."
			pv.Spec.NFS.Path = "/e"
		}, nfssubdir.AnnSubdir},
		{"a subdirectory climbing out", func(pv *v1.PersistentVolume) {
			pv.Annotations[nfssubdir.AnnSubdir] = "../other"
			pv.Spec.NFS.Path = "/other"
		}, nfssubdir.AnnSubdir},
		{"an absolute subdirectory", func(pv *v1.PersistentVolume) {
			pv.Annotations[nfssubdir.AnnSubdir] = "/e/canary"
			pv.Spec.NFS.Path = "/e/canary"
		}, nfssubdir.AnnSubdir},
		{"source elsewhere in the export", func(pv *v1.PersistentVolume) { pv.Spec.NFS.Path = "/e/canary" }, "is not s:/e/team-data-pvc-u-1"},
		{"source on another server", func(pv *v1.PersistentVolume) { pv.Spec.NFS.Server = "t" }, "is not s:/e"},
		{"annotations following a forged source", func(pv *v1.PersistentVolume) {
			pv.Annotations[nfssubdir.AnnSubdir] = "canary"
		}, "is not s:/e/canary"},
		{"no nfs source", func(pv *v1.PersistentVolume) {
			pv.Spec.PersistentVolumeSource = v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/e/canary"}}
		}, "spec.nfs is not set"},
		{"no archive-on-delete", func(pv *v1.PersistentVolume) { delete(pv.Annotations, provisioner.AnnArchiveOnDelete) }, provisioner.AnnArchiveOnDelete},
		{"option injection", func(pv *v1.PersistentVolume) { pv.Spec.MountOptions = []string{"hard,remount"} }, "spec.mountOptions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeExports{files: t.TempDir()}
			p, _ := newProvisioner(t, f)
			pv, files := provisioned(t, p, f, map[string]string{"server": "s", "path": "/e"})
			canary := filepath.Join(files, "canary")
			if err := os.Mkdir(canary, 0o755); err != nil {
				t.Fatal(err)
			}
			before, mounts := tree(t, f.files), len(f.Calls())
			tc.forge(pv)
			err := p.Delete(context.Background(), pv)
			if err == nil || !strings.Contains(err.Error(), "PersistentVolume pvc-u-1") || !strings.Contains(err.Error(), tc.wantErr) ||
				!strings.Contains(err.Error(), "nothing deleted") {
				t.Fatalf("Delete = %v, want an error naming the PV and %q", err, tc.wantErr)
			}
			if after := tree(t, f.files); !slices.Equal(after, before) {
				t.Errorf("a refused Delete changed the export: %q, was %q", after, before)
			}
			if calls := f.Calls(); len(calls) != mounts {
				t.Errorf("a refused Delete mounted: %q", calls[mounts:])
			}
		})
	}
}

func TestDeleteMountFailureTouchesNothing(t *testing.T) {
	f := &fakeExports{files: t.TempDir()}
	p, _ := newProvisioner(t, f)
	pv, files := provisioned(t, p, f, exportParams)
	before := tree(t, files)
	f.err = os.ErrPermission
	if err := p.Delete(context.Background(), pv); err == nil || !strings.Contains(err.Error(), "PersistentVolume pvc-u-1") ||
		!strings.Contains(err.Error(), "nfs.example:/exports/k8s") {
		t.Fatalf("Delete = %v, want the mount error naming the PV and the export", err)
	}
	if after := tree(t, files); !slices.Equal(after, before) {
		t.Errorf("Delete changed the export: %q, was %q", after, before)
	}
}

// TestSymlinkInTheExport plants a symlink to a directory outside the
// export where the pattern's first component goes: neither Provision nor
// Delete may follow it.
func TestSymlinkInTheExport(t *testing.T) {
	f := &fakeExports{files: t.TempDir()}
	p, _ := newProvisioner(t, f)
	params := map[string]string{"server": "s", "path": "/e", "pathPattern": "${.PVC.namespace}/${.PVC.name}"}
	pv, files := provisioned(t, p, f, params)
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(outside, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(files, "team")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(files, "team")); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(context.Background(), pv); err == nil {
		t.Error("Delete through a symlink succeeded")
	}
	if _, err := p.Provision(context.Background(), request(class(params), claim(map[string]string{"x": "y"}, nil))); err == nil {
		t.Error("Provision through a symlink succeeded")
	}
	if got := tree(t, outside); !slices.Equal(got, []string{"data"}) {
		t.Errorf("the directory the symlink points at holds %q, want it untouched", got)
	}
}
