package local

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner"
)

func TestNewCreatesAPrivateRoot(t *testing.T) {
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	root := filepath.Join(t.TempDir(), "var/lib/local")
	newProvisioner(t, root)
	st, err := os.Stat(root)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode() != os.ModeDir|0o700 {
		t.Errorf("root mode = %v, want drwx------", st.Mode())
	}
}

// A root that exists with a mode other users can pass (0755 from a
// package, a mkdir by hand) is made root-only.
func TestNewMakesAnExistingRootPrivate(t *testing.T) {
	root := filepath.Join(t.TempDir(), "local")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	newProvisioner(t, root)
	if st, err := os.Stat(root); err != nil || st.Mode() != os.ModeDir|0o700 {
		t.Errorf("root: %v, %v; want drwx------", st.Mode(), err)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	mustWrite(t, file)
	good := Config{Root: dir, NodeName: node, Mounter: mount.System{}, Logger: zap.NewNop()}
	for name, edit := range map[string]func(c *Config){
		"relative root":  func(c *Config) { c.Root = "var/lib/local" },
		"unclean root":   func(c *Config) { c.Root = dir + "/" },
		"slash":          func(c *Config) { c.Root = "/" },
		"symlinked root": func(c *Config) { c.Root = link },
		"file as root":   func(c *Config) { c.Root = file },
		"no node name":   func(c *Config) { c.NodeName = "" },
		"no mounter":     func(c *Config) { c.Mounter = nil },
		"no logger":      func(c *Config) { c.Logger = nil },
	} {
		cfg := good
		edit(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New succeeded, want an error", name)
		}
	}
	if _, err := New(good); err != nil {
		t.Errorf("New(good) = %v", err)
	}
}

func TestProvisionTwiceMakesOneDirectory(t *testing.T) {
	root := t.TempDir()
	p, _ := newProvisioner(t, root)
	req := request("data", "")
	first, err := p.Provision(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	second, err := p.Provision(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, second) {
		t.Errorf("second Provision = %+v, want %+v", second, first)
	}
	want := "ns-data-pvc-uid-data"
	if got := entries(t, root); !reflect.DeepEqual(got, []string{want}) {
		t.Fatalf("root holds %v, want [%s]", got, want)
	}
	st, err := os.Stat(filepath.Join(root, want))
	if err != nil || st.Mode() != os.ModeDir|0o777 {
		t.Errorf("volume directory: %v, %v; want drwxrwxrwx", st, err)
	}
}

func TestProvisionedPV(t *testing.T) {
	root := t.TempDir()
	p, _ := newProvisioner(t, root)
	req := request("data", "TRUE")
	pv := provision(t, p, req)
	if pv.Name != req.PVName || pv.Spec.Local == nil || pv.Spec.Local.Path != filepath.Join(root, "ns-data-"+req.PVName) {
		t.Fatalf("PV %s with source %+v", pv.Name, pv.Spec.PersistentVolumeSource)
	}
	if !reflect.DeepEqual(pv.Spec.NodeAffinity, nodeAffinity(node)) {
		t.Errorf("node affinity = %+v", pv.Spec.NodeAffinity)
	}
	terms := pv.Spec.NodeAffinity.Required.NodeSelectorTerms
	if e := terms[0].MatchExpressions[0]; e.Key != "kubernetes.io/hostname" || e.Operator != v1.NodeSelectorOpIn || !reflect.DeepEqual(e.Values, []string{node}) {
		t.Errorf("node affinity expression = %+v, want kubernetes.io/hostname In [%s]", e, node)
	}
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.Namespace != "ns" || ref.Name != "data" || ref.UID != req.Claim.UID {
		t.Errorf("claimRef = %+v", ref)
	}
	if got := pv.Spec.Capacity[v1.ResourceStorage]; got.String() != "5Gi" {
		t.Errorf("capacity = %s, want 5Gi", got.String())
	}
	want := map[string]string{provisioner.AnnProvisionedBy: provisioner.LocalName, provisioner.AnnArchiveOnDelete: "true"}
	if !reflect.DeepEqual(pv.Annotations, want) {
		t.Errorf("annotations = %v, want %v", pv.Annotations, want)
	}
}

func TestProvisionKeepsLongNamesUnderMaxName(t *testing.T) {
	root := t.TempDir()
	p, _ := newProvisioner(t, root)
	req := request(strings.Repeat("c", 253), "")
	req.Claim.UID = "0d9f8a4e-6b1c-4e8a-9a57-2f0c4b1d7e33"
	req.PVName = provisioner.PVName(req.Claim)
	pv := provision(t, p, req)
	name := filepath.Base(pv.Spec.Local.Path)
	if len(name) != maxName || !strings.HasSuffix(name, "-"+req.PVName) || !strings.HasPrefix(name, "ns-ccc") {
		t.Errorf("directory name %q (%d bytes)", name, len(name))
	}
	if err := p.Delete(t.Context(), pv); err != nil {
		t.Errorf("Delete of the long-named volume: %v", err)
	}
}

func TestProvisionRefuses(t *testing.T) {
	block := v1.PersistentVolumeBlock
	for _, tc := range []struct {
		name string
		edit func(r *provisioner.Request)
		want string
	}{
		{"another node", func(r *provisioner.Request) { r.SelectedNode = "node-b" }, `"node-b" is not this node`},
		{"no selected node", func(r *provisioner.Request) { r.SelectedNode = "" }, "is not this node"},
		{"block mode of a plain class", func(r *provisioner.Request) { r.Claim.Spec.VolumeMode = &block }, "volumeMode Block"},
		{"bad archiveOnDelete", func(r *provisioner.Request) {
			r.Class.Parameters = map[string]string{provisioner.ParamArchiveOnDelete: "yes"}
		}, "StorageClass local"},
		{"a misspelt archiveOnDelete", func(r *provisioner.Request) {
			r.Class.Parameters = map[string]string{"archiveOnDelte": "true"}
		}, `unknown parameter "archiveOnDelte"`},
		{"an unknown parameter beside a good one", func(r *provisioner.Request) {
			r.Class.Parameters = map[string]string{provisioner.ParamArchiveOnDelete: "true", "pathPattern": "x"}
		}, `unknown parameter "pathPattern"`},
		{"no class", func(r *provisioner.Request) { r.Class = nil }, "no class"},
		{"slash in the PV name", func(r *provisioner.Request) { r.PVName = "../../etc" }, "PV name"},
		{"slash in the claim name", func(r *provisioner.Request) { r.Claim.Name = "a/b" }, "metadata.name"},
		{"long PV name", func(r *provisioner.Request) { r.PVName = strings.Repeat("p", 200) }, "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			p, _ := newProvisioner(t, root)
			req := request("data", "")
			tc.edit(&req)
			_, err := p.Provision(t.Context(), req)
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, provisioner.ErrReschedule) {
				t.Fatalf("Provision = %v, want an error saying %q, not ErrReschedule", err, tc.want)
			}
			if got := entries(t, root); len(got) != 0 {
				t.Errorf("root holds %v after a refused request", got)
			}
		})
	}
}

func TestProvisionReschedulesWhenTheRootFails(t *testing.T) {
	t.Run("missing", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "root")
		p, _ := newProvisioner(t, root)
		if err := os.Remove(root); err != nil {
			t.Fatal(err)
		}
		_, err := p.Provision(t.Context(), request("data", ""))
		if !errors.Is(err, provisioner.ErrReschedule) {
			t.Fatalf("Provision = %v, want ErrReschedule", err)
		}
		if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
			t.Error("Provision re-created the missing root")
		}
	})
	for name, opts := range map[string]string{"read-only": "ro", "full": "nr_inodes=1"} {
		t.Run(name, func(t *testing.T) {
			needRoot(t)
			root := t.TempDir()
			if err := unix.Mount("tmpfs", root, "tmpfs", 0, opts); err != nil {
				t.Fatalf("mount tmpfs -o %s: %v", opts, err)
			}
			t.Cleanup(func() { unix.Unmount(root, 0) })
			p, _ := newProvisioner(t, root)
			_, err := p.Provision(t.Context(), request("data", ""))
			t.Log(err)
			if !errors.Is(err, provisioner.ErrReschedule) {
				t.Fatalf("Provision = %v, want ErrReschedule", err)
			}
		})
	}
}

func TestProvisionRefusesASymlinkedDirectory(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	p, _ := newProvisioner(t, root)
	req := request("data", "")
	if err := os.Symlink(outside, filepath.Join(root, "ns-data-"+req.PVName)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := p.Provision(t.Context(), req)
	if err == nil || errors.Is(err, provisioner.ErrReschedule) {
		t.Fatalf("Provision = %v, want an error other than ErrReschedule", err)
	}
	if st, _ := os.Stat(outside); st.Mode().Perm() != 0o700 {
		t.Errorf("the symlink's target got mode %v", st.Mode())
	}
}
