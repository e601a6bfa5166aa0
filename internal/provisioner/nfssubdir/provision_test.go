package nfssubdir_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/plugins/nfs"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/nfssubdir"
)

var exportParams = map[string]string{"server": "nfs.example", "path": "/exports/k8s"}

func TestProvisionMakesTheSubdirectoryOnce(t *testing.T) {
	f := &fakeExports{files: t.TempDir()}
	p, root := newProvisioner(t, f)
	req := request(class(exportParams, "nfsvers=4.1", "hard"), claim(nil, nil))

	vol, err := p.Provision(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	const rel = "team-data-pvc-u-1"
	want := provisioner.Volume{
		Source: v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "nfs.example", Path: "/exports/k8s/" + rel}},
		Annotations: map[string]string{
			provisioner.AnnArchiveOnDelete: "false",
			nfssubdir.AnnExport:            "nfs.example:/exports/k8s",
			nfssubdir.AnnSubdir:            rel,
		},
	}
	if !reflect.DeepEqual(vol, want) {
		t.Fatalf("Provision = %+v, want %+v", vol, want)
	}
	files := f.exportDir("nfs.example", "/exports/k8s")
	info, err := os.Stat(filepath.Join(files, rel))
	if err != nil || !info.IsDir() || info.Mode().Perm() != 0o777 {
		t.Fatalf("the subdirectory: %v, %v; want a directory with mode 0777", info, err)
	}
	if err := os.WriteFile(filepath.Join(files, rel, "kept"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	again, err := p.Provision(context.Background(), req)
	if err != nil || !reflect.DeepEqual(again, want) {
		t.Fatalf("second Provision = %+v, %v; want %+v", again, err, want)
	}
	if got := tree(t, files); !slices.Equal(got, []string{rel, rel + "/kept"}) {
		t.Errorf("export holds %q after two calls, want the one subdirectory and its file", got)
	}
	mountDir := filepath.Join(root, "plugins", "volume-agent.io~nfs-subdir", "mounts")
	for _, call := range f.Calls() {
		if !strings.HasPrefix(call, "setup nfs.example:/exports/k8s [nfsvers=4.1,hard] "+mountDir+"/") {
			t.Errorf("mount call %q: want the export with the class's options, under %s", call, mountDir)
		}
	}
	if calls := f.Calls(); len(calls) != 2 || calls[0] != calls[1] {
		t.Errorf("mount calls %q: want the same mount directory twice (SetUp is the live check)", calls)
	}
}

func TestPathPattern(t *testing.T) {
	labels := map[string]string{"app": "web", "dots": "..", "empty": "", "arch": "archived-x", "Arch": "ARCHIVED-x", "hidden": ".x"}
	annotations := map[string]string{"escape": "../x", "abs": "/etc", "deep": "a/b", "up": "a/../../b", "nul": "a\x00b",
		"marker": "a/.volume-agent-provisioning", "archive": "a/archived-b/c"}
	for _, tc := range []struct {
		name, pattern, want, wantErr string
	}{
		{"namespace and name", "${.PVC.namespace}/${.PVC.name}", "team/data", ""},
		{"label and literal text", "apps/${.PVC.labels.app}-${.PVC.name}", "apps/web-data", ""},
		{"annotation making two levels", "${.PVC.annotations.deep}", "a/b", ""},
		{"literal only", "fixed", "fixed", ""},
		{"missing label", "${.PVC.labels.tier}", "", `no label "tier"`},
		{"missing annotation", "${.PVC.annotations.owner}", "", `no annotation "owner"`},
		{"label value ..", "${.PVC.labels.dots}", "", "outside the export"},
		{"annotation climbing out", "${.PVC.annotations.escape}", "", "outside the export"},
		{"annotation climbing out midway", "x/${.PVC.annotations.up}", "", "outside the export"},
		{"absolute annotation", "${.PVC.annotations.abs}", "", "outside the export"},
		{"NUL in a value", "${.PVC.annotations.nul}", "", "outside the export"},
		{"empty value leaves an empty component", "${.PVC.namespace}/${.PVC.labels.empty}/x", "", "outside the export"},
		{"empty value alone", "${.PVC.labels.empty}", "", "outside the export"},
		{"absolute pattern", "/${.PVC.name}", "", "outside the export"},
		{"literal ..", "../${.PVC.name}", "", "outside the export"},
		{"trailing slash", "${.PVC.name}/", "", "outside the export"},
		{"label naming an archive", "${.PVC.labels.arch}", "", `component "archived-x" starts with "archived-"`},
		{"label naming an archive in capitals", "${.PVC.labels.Arch}", "", `component "ARCHIVED-x" starts with "archived-"`},
		{"annotation with an archive inside", "${.PVC.annotations.archive}", "", `component "archived-b" starts with "archived-"`},
		{"label with a dot-name", "${.PVC.labels.hidden}", "", `component ".x" starts with '.'`},
		{"annotation naming a marker", "${.PVC.annotations.marker}", "", "starts with '.'"},
		{"literal dot-name", ".snapshots/${.PVC.name}", "", "starts with '.'"},
		{"archived inside a name is fine", "${.PVC.name}-archived-${.PVC.labels.app}", "data-archived-web", ""},
		{"unknown field", "${.PVC.uid}", "", "only ${.PVC.namespace}"},
		{"not the claim", "${.PV.name}", "", "only ${.PVC.namespace}"},
		{"label without a key", "${.PVC.labels.}", "", "only ${.PVC.namespace}"},
		{"unclosed", "${.PVC.name", "", "no closing '}'"},
		{"empty", "", "", "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeExports{files: t.TempDir()}
			p, _ := newProvisioner(t, f)
			params := map[string]string{"server": "s", "path": "/e", "pathPattern": tc.pattern}
			vol, err := p.Provision(context.Background(), request(class(params), claim(labels, annotations)))
			files := f.exportDir("s", "/e")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "StorageClass shared: parameter pathPattern") {
					t.Fatalf("Provision = %v, want an error naming the class, the parameter and %q", err, tc.wantErr)
				}
				if got := tree(t, f.files); len(got) != 0 {
					t.Errorf("a refused pattern left %q", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if vol.Source.NFS.Path != "/e/"+tc.want || vol.Annotations[nfssubdir.AnnSubdir] != tc.want {
				t.Errorf("Provision = %+v, want path /e/%s", vol, tc.want)
			}
			if info, err := os.Stat(filepath.Join(files, tc.want)); err != nil || !info.IsDir() {
				t.Errorf("subdirectory %s: %v", tc.want, err)
			}
		})
	}
}

func TestClassParameters(t *testing.T) {
	for _, tc := range []struct {
		name    string
		params  map[string]string
		options []string
		wantErr string
	}{
		{"no server", map[string]string{"path": "/e"}, nil, "parameter server is required"},
		{"server that is an option", map[string]string{"server": "-oremount", "path": "/e"}, nil, `parameter server "-oremount"`},
		{"server with a comma", map[string]string{"server": "a,b", "path": "/e"}, nil, "parameter server"},
		{"server with a space", map[string]string{"server": "a b", "path": "/e"}, nil, "parameter server"},
		{"server with a slash", map[string]string{"server": "a/b", "path": "/e"}, nil, "parameter server"},
		{"no path", map[string]string{"server": "s"}, nil, "parameter path"},
		{"relative path", map[string]string{"server": "s", "path": "e"}, nil, `parameter path "e" must be an absolute`},
		{"path with a comma", map[string]string{"server": "s", "path": "/e,rw"}, nil, "parameter path"},
		{"path with a newline", map[string]string{"server": "s", "path": "/e\n"}, nil, "parameter path"},
		{"archiveOnDelete typo", map[string]string{"server": "s", "path": "/e", "archiveOnDelete": "yes"}, nil, "parameter archiveOnDelete"},
		{"unknown parameter", map[string]string{"server": "s", "path": "/e", "archiveondelete": "true"}, nil, `unknown parameter "archiveondelete"`},
		{"option injection", map[string]string{"server": "s", "path": "/e"}, []string{"vers=3,rw"}, "mountOptions"},
		{"option that is a flag", map[string]string{"server": "s", "path": "/e"}, []string{"--bind"}, "mountOptions"},
		{"empty option", map[string]string{"server": "s", "path": "/e"}, []string{""}, "mountOptions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeExports{files: t.TempDir()}
			p, _ := newProvisioner(t, f)
			_, err := p.Provision(context.Background(), request(class(tc.params, tc.options...), claim(nil, nil)))
			if err == nil || !strings.Contains(err.Error(), "StorageClass shared") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Provision = %v, want an error naming the class and %q", err, tc.wantErr)
			}
			if calls := f.Calls(); len(calls) != 0 {
				t.Errorf("a refused class mounted: %q", calls)
			}
		})
	}
}

func TestTrailingSlashIsTheSameExport(t *testing.T) {
	f := &fakeExports{files: t.TempDir()}
	p, _ := newProvisioner(t, f)
	for _, path := range []string{"/e/", "/e"} {
		vol, err := p.Provision(context.Background(), request(class(map[string]string{"server": "s", "path": path}), claim(nil, nil)))
		if err != nil || vol.Source.NFS.Path != "/e/team-data-pvc-u-1" || vol.Annotations[nfssubdir.AnnExport] != "s:/e" {
			t.Fatalf("Provision with path %q = %+v, %v", path, vol, err)
		}
	}
	if calls := f.Calls(); len(calls) != 2 || calls[0] != calls[1] {
		t.Errorf("mounts %q: want one mount directory for both spellings", calls)
	}
}

func TestIPv6Server(t *testing.T) {
	f := &fakeExports{files: t.TempDir()}
	p, _ := newProvisioner(t, f)
	req := request(class(map[string]string{"server": "fd00::1", "path": "/e"}), claim(nil, nil))
	vol, err := p.Provision(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if vol.Annotations[nfssubdir.AnnExport] != "fd00::1:/e" {
		t.Fatalf("export annotation %q", vol.Annotations[nfssubdir.AnnExport])
	}
	if err := p.Delete(context.Background(), provisioner.NewPV(req, provisioner.NFSSubdirName, vol)); err != nil {
		t.Fatalf("Delete of an IPv6 export's PV: %v", err)
	}
}

func TestMountFailureNamesClassAndServer(t *testing.T) {
	f := &fakeExports{files: t.TempDir(), err: errors.New("connection refused")}
	p, _ := newProvisioner(t, f)
	_, err := p.Provision(context.Background(), request(class(exportParams), claim(nil, nil)))
	if err == nil || !strings.Contains(err.Error(), "StorageClass shared") || !strings.Contains(err.Error(), "nfs.example:/exports/k8s") ||
		!strings.Contains(err.Error(), "connection refused") || errors.Is(err, provisioner.ErrReschedule) {
		t.Fatalf("Provision = %v, want the mount's error naming the class and the export, not ErrReschedule", err)
	}
}

// failingTool is mount(8) on a node without an NFS client.
type failingTool struct{ args chan []string }

func (f failingTool) Mount(source, _, fsType string, options []string) error {
	f.args <- append([]string{fsType, source}, options...)
	return errors.New("mount.nfs: no such program")
}

// TestThroughTheNFSPlugin provisions through the real NFS plugin, whose
// mount(8) fails: the export is asked for with the class's options, and
// the plugin's error reaches the caller with the class and the server.
func TestThroughTheNFSPlugin(t *testing.T) {
	tool := failingTool{args: make(chan []string, 1)}
	p, root := newProvisioner(t, &nfs.Plugin{Tool: tool})
	_, err := p.Provision(context.Background(), request(class(exportParams, "nfsvers=4.1"), claim(nil, nil)))
	if err == nil || !strings.Contains(err.Error(), "StorageClass shared") || !strings.Contains(err.Error(), "nfs.example:/exports/k8s") ||
		!strings.Contains(err.Error(), "no such program") {
		t.Fatalf("Provision = %v, want mount(8)'s error naming the class and the export", err)
	}
	if got := <-tool.args; !slices.Equal(got, []string{"nfs", "nfs.example:/exports/k8s", "nfsvers=4.1"}) {
		t.Errorf("mount(8) got %q", got)
	}
	mounts := filepath.Join(root, "plugins", "volume-agent.io~nfs-subdir", "mounts")
	if got := tree(t, mounts); len(got) != 0 {
		t.Errorf("a failed mount left %q in %s", got, mounts)
	}
}

func TestHungServerFailsWithinTheTimeout(t *testing.T) {
	f := &fakeExports{files: t.TempDir(), hang: true}
	p, err := nfssubdir.New(nfssubdir.Config{RootDir: t.TempDir(), Exports: f, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = p.Provision(context.Background(), request(class(exportParams), claim(nil, nil)))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("Provision = %v after %v, want a deadline error within the timeout", err, time.Since(start))
	}
}
