package nfssubdir_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/nfssubdir"
	"github.com/volume-agent/volume-agent/internal/provisioner/storagedir"
)

// patternParams is a class whose pathPattern the claim's label dir
// chooses, as a claim's author can.
var patternParams = map[string]string{"server": "s", "path": "/e", "pathPattern": "${.PVC.labels.dir}"}

// dirClaim is a claim with UID uid whose label dir is dir.
func dirClaim(uid, dir string) *v1.PersistentVolumeClaim {
	c := claim(map[string]string{"dir": dir}, nil)
	c.Name, c.UID = "claim-"+uid, types.UID(uid)
	return c
}

// nfsPV is a PV named name whose nfs source is server:path.
func nfsPV(name, server, path string) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{
			NFS: &v1.NFSVolumeSource{Server: server, Path: path},
		}},
	}
}

// tentative is the cluster controller's request for claim, with pvs as the
// PVs that exist.
func tentative(c *v1.PersistentVolumeClaim, pvs ...*v1.PersistentVolume) provisioner.Request {
	req := request(class(patternParams), c)
	req.Tentative = true
	req.PVs = func() []*v1.PersistentVolume { return pvs }
	return req
}

func TestProvisionRefusesPathsOtherPVsUse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dir    string // the path the claim's annotation chooses
		other  *v1.PersistentVolume
		refuse bool
	}{
		{"the same directory", "shared", nfsPV("pvc-other", "s", "/e/shared"), true},
		{"the same directory, written otherwise", "shared", nfsPV("pvc-other", "S", "/e//shared/"), true},
		{"a directory inside it", "shared", nfsPV("pvc-other", "s", "/e/shared/sub"), true},
		{"a directory it is inside", "shared/sub", nfsPV("pvc-other", "s", "/e/shared"), true},
		{"a static PV of the whole export", "shared", nfsPV("pv-backup", "s", "/e"), false},
		{"a static PV above the export", "shared", nfsPV("pv-backup", "s", "/"), false},
		{"a sibling sharing a prefix", "shared", nfsPV("pvc-other", "s", "/e/shared2"), false},
		{"another server", "shared", nfsPV("pvc-other", "t", "/e/shared"), false},
		{"the PV being provisioned", "shared", nfsPV("pvc-u-new", "s", "/e/shared"), false},
		{"a PV without an nfs source", "shared", &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-local"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeExports{files: t.TempDir()}
			p, _ := newProvisioner(t, f)
			files := f.exportDir("s", "/e")
			if tc.refuse { // the other PV's data, which must stay as it is
				mkdir(t, filepath.Join(files, "shared", "sub"))
				write(t, filepath.Join(files, "shared", "data"))
			}
			before := tree(t, files)
			c := claim(nil, map[string]string{"dir": tc.dir})
			c.UID = "u-new"
			req := request(class(map[string]string{"server": "s", "path": "/e", "pathPattern": "${.PVC.annotations.dir}"}), c)
			req.Tentative = true
			req.PVs = func() []*v1.PersistentVolume {
				return []*v1.PersistentVolume{nfsPV("pv-unrelated", "s", "/e/other"), tc.other}
			}
			_, err := p.Provision(context.Background(), req)
			if !tc.refuse {
				if err != nil {
					t.Fatalf("Provision = %v, want success", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "PersistentVolume "+tc.other.Name) || !strings.Contains(err.Error(), "StorageClass shared") {
				t.Fatalf("Provision = %v, want a refusal naming the class and PersistentVolume %s", err, tc.other.Name)
			}
			if after := tree(t, files); !slices.Equal(after, before) {
				t.Errorf("a refused Provision changed the export: %q, was %q", after, before)
			}
		})
	}
}

func TestProvisionRefusesADirectoryBeingProvisioned(t *testing.T) {
	f := &fakeExports{files: t.TempDir()}
	p, _ := newProvisioner(t, f)
	files := f.exportDir("s", "/e")
	first := tentative(dirClaim("u-1", "shared"))
	vol, err := p.Provision(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	if got := readMarker(t, filepath.Join(files, "shared")); got != "pvc-u-1" {
		t.Fatalf("marker %q, want pvc-u-1", got)
	}
	// Its PV does not exist yet: the marker alone keeps the directory.
	for _, req := range []provisioner.Request{tentative(dirClaim("u-2", "shared")), request(class(patternParams), dirClaim("u-2", "shared"))} {
		if _, err := p.Provision(context.Background(), req); err == nil || !strings.Contains(err.Error(), "being provisioned for pvc-u-1") {
			t.Fatalf("Provision of a second claim = %v, want a refusal naming pvc-u-1", err)
		}
	}
	nested := tentative(dirClaim("u-3", "x"))
	nested.Claim.Annotations = map[string]string{"dir": "shared/sub"}
	nested.Class = class(map[string]string{"server": "s", "path": "/e", "pathPattern": "${.PVC.annotations.dir}"})
	if _, err := p.Provision(context.Background(), nested); err == nil || !strings.Contains(err.Error(), "being provisioned for pvc-u-1") {
		t.Fatalf("Provision inside it = %v, want a refusal naming pvc-u-1", err)
	}
	// A retry for the same PV, after a crash, finds its own directory.
	if _, err := p.Provision(context.Background(), first); err != nil {
		t.Fatalf("Provision again for pvc-u-1 = %v", err)
	}
	// Once its PV exists the marker goes, and the PV keeps the directory.
	pv := provisioner.NewPV(first, provisioner.NFSSubdirName, vol)
	if err := p.Commit(context.Background(), pv); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(context.Background(), pv); err != nil {
		t.Fatalf("Commit again = %v", err)
	}
	if got := tree(t, files); !slices.Equal(got, []string{"shared"}) {
		t.Fatalf("after Commit the export holds %q, want the empty directory", got)
	}
	if _, err := p.Provision(context.Background(), tentative(dirClaim("u-2", "shared"), pv)); err == nil || !strings.Contains(err.Error(), "PersistentVolume pvc-u-1") {
		t.Fatalf("Provision of a second claim = %v, want a refusal naming pvc-u-1", err)
	}
}

// TestOneOfTwoRacingClaimsGetsTheDirectory provisions claims whose paths
// meet at the same time, each seeing no PV: exactly one gets it.
func TestOneOfTwoRacingClaimsGetsTheDirectory(t *testing.T) {
	for range 20 {
		f := &fakeExports{files: t.TempDir()}
		p, _ := newProvisioner(t, f)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = p.Provision(context.Background(), tentative(dirClaim("u-"+string(rune('a'+i)), "shared")))
			})
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
			}
		}
		if won != 1 {
			t.Fatalf("%d claims got the directory (%v), want 1", won, errs)
		}
	}
}

func TestAbandon(t *testing.T) {
	for _, tc := range []struct {
		name     string
		before   func(t *testing.T, dir string) // before Provision; dir does not exist
		after    func(t *testing.T, dir string) // between Provision and Abandon
		others   []*v1.PersistentVolume
		wantKept string // "" for removed
		wantLeft []string
	}{
		{name: "made by this provisioning", wantLeft: nil},
		{name: "there before, empty", before: func(t *testing.T, dir string) {
			mkdir(t, dir)
		}, wantKept: "it was there before", wantLeft: []string{"shared"}},
		{name: "written to since it was made", after: func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "data"))
		}, wantKept: "files were written in it", wantLeft: []string{"shared", "shared/data"}},
		{name: "another PV uses it", others: []*v1.PersistentVolume{nfsPV("pv-static", "s", "/e/shared")},
			wantKept: "PersistentVolume pv-static uses s:/e/shared", wantLeft: []string{"shared"}},
		{name: "gone already", after: func(t *testing.T, dir string) {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeExports{files: t.TempDir()}
			p, root := newProvisioner(t, f)
			files := f.exportDir("s", "/e")
			dir := filepath.Join(files, "shared")
			if tc.before != nil {
				tc.before(t, dir)
			}
			req := tentative(dirClaim("u-1", "shared"))
			vol, err := p.Provision(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if tc.after != nil {
				tc.after(t, dir)
			}
			// A restart between the directory and the PV: a new provisioner
			// must still tell its own directory from one that was there.
			p, err = nfssubdir.New(nfssubdir.Config{RootDir: root, Exports: f})
			if err != nil {
				t.Fatal(err)
			}
			req.PVs = func() []*v1.PersistentVolume { return tc.others }
			kept, err := p.Abandon(context.Background(), req, provisioner.NewPV(req, provisioner.NFSSubdirName, vol))
			if err != nil || !strings.Contains(kept, tc.wantKept) || (tc.wantKept == "") != (kept == "") {
				t.Fatalf("Abandon = %q, %v; want kept %q", kept, err, tc.wantKept)
			}
			if got := tree(t, files); !slices.Equal(got, tc.wantLeft) {
				t.Errorf("after Abandon the export holds %q, want %q", got, tc.wantLeft)
			}
		})
	}
}

func TestAbandonRefusesForgedPVs(t *testing.T) {
	f := &fakeExports{files: t.TempDir()}
	p, _ := newProvisioner(t, f)
	req := tentative(dirClaim("u-1", "shared"))
	vol, err := p.Provision(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	pv := provisioner.NewPV(req, provisioner.NFSSubdirName, vol)
	pv.Spec.NFS.Path = "/e/elsewhere"
	before := tree(t, f.files)
	if _, err := p.Abandon(context.Background(), req, pv); err == nil || !strings.Contains(err.Error(), "nothing deleted") {
		t.Fatalf("Abandon of a forged PV = %v, want a refusal", err)
	}
	if after := tree(t, f.files); !slices.Equal(after, before) {
		t.Errorf("a refused Abandon changed %q to %q", before, after)
	}
}

func TestWithoutTentativeNoMarker(t *testing.T) {
	f := &fakeExports{files: t.TempDir()}
	p, _ := newProvisioner(t, f)
	if _, err := p.Provision(context.Background(), request(class(patternParams), dirClaim("u-1", "shared"))); err != nil {
		t.Fatal(err)
	}
	if got := tree(t, f.exportDir("s", "/e")); !slices.Equal(got, []string{"shared"}) {
		t.Errorf("the export holds %q, want the directory alone: manifest mode settles nothing", got)
	}
}

func readMarker(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, storagedir.MarkerName))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
}
