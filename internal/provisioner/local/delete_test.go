package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
)

func TestDeleteRemoves(t *testing.T) {
	root := t.TempDir()
	p, logs := newProvisioner(t, root)
	pv := provision(t, p, request("data", ""))
	mustWrite(t, filepath.Join(pv.Spec.Local.Path, "sub/file"))
	for i := range 2 { // the second finds it gone
		if err := p.Delete(t.Context(), pv); err != nil {
			t.Fatalf("delete %d: %v", i, err)
		}
	}
	if got := entries(t, root); len(got) != 0 {
		t.Errorf("root holds %v after Delete", got)
	}
	if n := logs.FilterMessage("removed local volume").FilterField(zap.String("pv", pv.Name)).Len(); n != 2 {
		t.Errorf("%d logs of the removal, want 2", n)
	}
}

func TestDeleteArchives(t *testing.T) {
	root := t.TempDir()
	p, logs := newProvisioner(t, root)
	pv := provision(t, p, request("data", "true"))
	mustWrite(t, filepath.Join(pv.Spec.Local.Path, "file"))
	for i := range 2 { // the second finds the archive
		if err := p.Delete(t.Context(), pv); err != nil {
			t.Fatalf("delete %d: %v", i, err)
		}
	}
	archive := "archived-" + filepath.Base(pv.Spec.Local.Path)
	if got := entries(t, root); !reflect.DeepEqual(got, []string{archive}) {
		t.Fatalf("root holds %v, want [%s]", got, archive)
	}
	if _, err := os.Stat(filepath.Join(root, archive, "file")); err != nil {
		t.Errorf("the archive lost the volume's data: %v", err)
	}
	if n := logs.FilterMessage("archived local volume").FilterField(zap.String("archive", filepath.Join(root, archive))).Len(); n != 2 {
		t.Errorf("%d logs of the archive, want 2", n)
	}
	// Gone altogether (an administrator removed the archive): nothing to do.
	if err := os.RemoveAll(filepath.Join(root, archive)); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(t.Context(), pv); err != nil {
		t.Errorf("Delete of a volume gone with its archive = %v", err)
	}
}

func TestDeleteRefusesAMountBelow(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	p, _ := newProvisioner(t, root)
	pv := provision(t, p, request("data", ""))
	mnt := filepath.Join(pv.Spec.Local.Path, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(t.TempDir(), mnt, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, 0) })
	mustWrite(t, filepath.Join(mnt, "on-the-mount"))
	if err := p.Delete(t.Context(), pv); err == nil {
		t.Fatal("Delete succeeded with a mount below the volume")
	}
	if _, err := os.Stat(filepath.Join(mnt, "on-the-mount")); err != nil {
		t.Errorf("the mount's content: %v", err)
	}
}

func TestDeleteRefusesForgedPVs(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, pv *v1.PersistentVolume, root, outside string)
		want string
	}{
		{"path outside the root", func(t *testing.T, pv *v1.PersistentVolume, root, outside string) {
			pv.Spec.Local.Path = filepath.Join(outside, "ns-data-"+pv.Name)
		}, "not directly under"},
		{"path with ..", func(t *testing.T, pv *v1.PersistentVolume, root, outside string) {
			pv.Spec.Local.Path = root + "/../" + filepath.Base(outside) + "/ns-data-" + pv.Name
		}, "not directly under"},
		{"the root itself", func(t *testing.T, pv *v1.PersistentVolume, root, outside string) {
			pv.Spec.Local.Path = root
		}, "not directly under"},
		{"nested path", func(t *testing.T, pv *v1.PersistentVolume, root, outside string) {
			pv.Spec.Local.Path = filepath.Join(pv.Spec.Local.Path, "ns-data-"+pv.Name)
		}, "not directly under"},
		{"another PV's directory", func(t *testing.T, pv *v1.PersistentVolume, root, outside string) {
			pv.Name = "pvc-other"
		}, "does not end with"},
		{"only the PV name", func(t *testing.T, pv *v1.PersistentVolume, root, outside string) {
			pv.Name = "ns-data-" + pv.Name
		}, "does not end with"},
		{"another node", func(t *testing.T, pv *v1.PersistentVolume, root, outside string) {
			pv.Spec.NodeAffinity = nodeAffinity("node-b")
		}, "does not pin it"},
		{"this node or another", func(t *testing.T, pv *v1.PersistentVolume, root, outside string) {
			other := nodeAffinity("node-b").Required.NodeSelectorTerms[0]
			terms := &pv.Spec.NodeAffinity.Required.NodeSelectorTerms
			*terms = append(*terms, other)
		}, "does not pin it"},
		{"no node affinity", func(t *testing.T, pv *v1.PersistentVolume, root, outside string) {
			pv.Spec.NodeAffinity = nil
		}, "does not pin it"},
		{"not a local PV", func(t *testing.T, pv *v1.PersistentVolume, root, outside string) {
			pv.Spec.PersistentVolumeSource = v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/etc"}}
		}, "spec.local is not set"},
		{"symlinked path", func(t *testing.T, pv *v1.PersistentVolume, root, outside string) {
			if err := os.RemoveAll(pv.Spec.Local.Path); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, pv.Spec.Local.Path); err != nil {
				t.Fatal(err)
			}
		}, "symlink"},
	} {
		for _, archive := range []string{"false", "true"} {
			t.Run(tc.name+" archive="+archive, func(t *testing.T) {
				root, outside := t.TempDir(), t.TempDir()
				p, _ := newProvisioner(t, root)
				pv := provision(t, p, request("data", archive))
				mustWrite(t, filepath.Join(pv.Spec.Local.Path, "file"))
				mustWrite(t, filepath.Join(outside, "ns-data-"+pv.Name, "file"))
				tc.edit(t, pv, root, outside)
				before := listTree(t, root) + listTree(t, outside)
				err := p.Delete(t.Context(), pv)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Delete = %v, want an error saying %q", err, tc.want)
				}
				if after := listTree(t, root) + listTree(t, outside); after != before {
					t.Errorf("Delete changed files although it refused:\nbefore %s\nafter  %s", before, after)
				}
			})
		}
	}
}

// listTree renders every path below dir, for comparing before and after.
func listTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		b.WriteString(path + " " + info.Mode().String() + "\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestMoveAsideRestoreAndDeleteFromAside(t *testing.T) {
	for _, archive := range []string{"false", "true"} {
		t.Run("archive="+archive, func(t *testing.T) {
			root := t.TempDir()
			p, _ := newProvisioner(t, root)
			pv := provision(t, p, request("data", archive))
			mustWrite(t, filepath.Join(pv.Spec.Local.Path, "file"))
			aside := filepath.Join(root, ".pending-delete-"+pv.Name)
			for i := range 2 { // the second finds it aside
				if err := p.MoveAside(t.Context(), pv); err != nil {
					t.Fatalf("MoveAside %d: %v", i, err)
				}
			}
			if got := entries(t, root); !reflect.DeepEqual(got, []string{filepath.Base(aside)}) {
				t.Fatalf("root holds %v after MoveAside, want only %s", got, filepath.Base(aside))
			}
			for i := range 2 {
				if err := p.Restore(t.Context(), pv); err != nil {
					t.Fatalf("Restore %d: %v", i, err)
				}
			}
			if _, err := os.Stat(filepath.Join(pv.Spec.Local.Path, "file")); err != nil {
				t.Fatalf("after Restore: %v", err)
			}
			if err := p.MoveAside(t.Context(), pv); err != nil {
				t.Fatal(err)
			}
			if err := p.Delete(t.Context(), pv); err != nil {
				t.Fatal(err)
			}
			want := []string(nil)
			if archive == "true" {
				want = []string{"archived-" + filepath.Base(pv.Spec.Local.Path)}
				if _, err := os.Stat(filepath.Join(root, want[0], "file")); err != nil {
					t.Errorf("the archive: %v", err)
				}
			}
			if got := entries(t, root); !reflect.DeepEqual(got, want) {
				t.Errorf("root holds %v after Delete, want %v", got, want)
			}
			if err := p.Restore(t.Context(), pv); !errors.Is(err, provisioner.ErrGone) {
				t.Errorf("Restore of deleted storage = %v, want ErrGone", err)
			}
		})
	}
}

func TestNothingMovesWhileMounted(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	p, _ := newProvisioner(t, root)
	pv := provision(t, p, request("data", ""))
	mustWrite(t, filepath.Join(pv.Spec.Local.Path, "sub/file"))
	pod := filepath.Join(t.TempDir(), "pod-volume")
	if err := os.Mkdir(pod, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(filepath.Join(pv.Spec.Local.Path, "sub"), pod, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(pod, unix.MNT_DETACH) })
	before := listTree(t, root)
	for name, call := range map[string]func(context.Context, *v1.PersistentVolume) error{
		"MoveAside": p.MoveAside, "Restore": p.Restore, "Delete": p.Delete,
	} {
		if err := call(t.Context(), pv); !errors.Is(err, provisioner.ErrInUse) || !strings.Contains(err.Error(), pod) {
			t.Errorf("%s of a volume a pod has mounted = %v, want ErrInUse naming %s", name, err, pod)
		}
	}
	if after := listTree(t, root); after != before {
		t.Errorf("a refused call changed the root:\nbefore %s\nafter  %s", before, after)
	}
}
