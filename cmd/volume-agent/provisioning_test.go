package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/local"
	"github.com/volume-agent/volume-agent/internal/provisioner/storagecapacity"
)

// An agent that cannot enforce capacity runs on without a backend, warns,
// and hands the reason to the provisioner; one that can opens the root's
// backend (images on a root that is not btrfs) and records nothing yet.
func TestOpenCapacity(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	root := t.TempDir()
	b, err := openCapacity(t.Context(), options{unprivileged: true}, root, mount.Unprivileged{}, zap.New(core))
	if b != nil || err == nil || !strings.Contains(err.Error(), "--unprivileged") {
		t.Errorf("unprivileged: backend %v, reason %v; want none, and a reason naming --unprivileged", b, err)
	}
	if logs.FilterMessage("capacity not enforced on the local path root").Len() != 1 {
		t.Errorf("logs %v, want one warning", logs.All())
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("an unprivileged agent wrote %v into the root", entries)
	}
	var st unix.Statfs_t
	if os.Geteuid() != 0 || unix.Statfs(root, &st) != nil || st.Type == unix.BTRFS_SUPER_MAGIC {
		t.Skip("the rest needs root (a backend runs losetup and mount) and a temporary directory not on btrfs (whose quotas may be off)")
	}
	b, err = openCapacity(t.Context(), options{}, root, mount.System{}, zap.New(core))
	if b == nil || err != nil {
		t.Fatalf("openCapacity = %v, %v; want a backend", b, err)
	}
	if logs.FilterMessage("local path root opened for enforced capacity").Len() != 1 {
		t.Errorf("logs %v, want one line saying the backend", logs.All())
	}

	// A volume whose recovery fails (here: a record of a state this
	// version does not know) is on the root all the same, and counted.
	record := `{"name": "vol-a", "backend": "` + b.Kind() + `", "state": "shredding", "size": 1048576}`
	if err := os.WriteFile(filepath.Join(root, ".capacity", "vol-a.json"), []byte(record), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openCapacity(t.Context(), options{}, root, mount.System{}, zap.New(core)); err != nil {
		t.Fatal(err)
	}
	lines := logs.FilterMessage("local path root opened for enforced capacity").All()
	if f := lines[len(lines)-1].ContextMap(); f["volumes"] != int64(1) || f["notRecovered"] != int64(1) {
		t.Errorf("with one volume not recovered the start logs %v; want volumes 1, notRecovered 1", f)
	}
}

// With the CSI endpoint on, the local controller leaves the claims of
// local.volume-agent.io classes to the external-provisioner and still
// provisions those of volume-agent.io/local classes, the storage
// capacity runner withdraws this node's objects instead of publishing, and
// the CSIDriver object is checked, its problem (here: missing) shown by
// /healthz's warnings.
func TestRunnersWithCSIEndpoint(t *testing.T) {
	for _, endpoint := range []string{"", "/var/lib/kubelet/plugins/local.volume-agent.io/csi.sock"} {
		l, err := local.New(local.Config{Root: t.TempDir(), NodeName: "node-a", Mounter: mount.Unprivileged{}, Logger: zap.NewNop(),
			NoCapacity: errors.New("test")})
		if err != nil {
			t.Fatal(err)
		}
		p := &provisioners{local: l, live: map[*provisioner.Controller]bool{}}
		wffc := storagev1.VolumeBindingWaitForFirstConsumer
		var objs []runtime.Object
		for _, name := range []string{provisioner.LocalName, provisioner.LegacyLocalName} {
			cls := strings.ReplaceAll(name, "/", "-")
			objs = append(objs, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: cls}, Provisioner: name,
				VolumeBindingMode: &wffc, Parameters: map[string]string{"enforce": "false"}},
				&v1.PersistentVolumeClaim{
					ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: cls, UID: types.UID("uid-" + cls),
						Annotations: map[string]string{provisioner.AnnStorageProvisioner: name, provisioner.AnnSelectedNode: "node-a"}},
					Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &cls, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
						Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Mi")}}},
					Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimPending},
				})
		}
		client := fake.NewClientset(objs...)
		r, err := p.runners(client, options{nodeName: "node-a", capacityNS: "volume-agent", csiEndpoint: endpoint}, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		_, withdraws := r["local storage capacity"].(*storagecapacity.Withdrawal)
		if withdraws != (endpoint != "") || (p.room == nil) != (endpoint != "") {
			t.Errorf("endpoint %q: capacity runner %T, publisher %v", endpoint, r["local storage capacity"], p.room)
		}
		check, checks := r["CSIDriver check"].(*storagecapacity.DriverCheck)
		if checks != (endpoint != "") {
			t.Errorf("endpoint %q: CSIDriver check %T", endpoint, r["CSIDriver check"])
		}
		if checks {
			check.Check(t.Context())
			if w := p.warnings(); len(w) != 1 || !strings.Contains(w[0], "CSIDriver local.volume-agent.io does not exist") {
				t.Errorf("endpoint %q: warnings %q, want the missing CSIDriver", endpoint, w)
			}
		} else if w := p.warnings(); w != nil {
			t.Errorf("endpoint %q: warnings %q, want none", endpoint, w)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r["local provisioner"].Run(ctx) }()
		pvs := func() []string {
			list, _ := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
			var names []string
			for _, pv := range list.Items {
				names = append(names, pv.Name)
			}
			slices.Sort(names)
			return names
		}
		want := []string{"pvc-uid-local.volume-agent.io", "pvc-uid-volume-agent.io-local"}
		if endpoint != "" {
			want = want[1:]
		}
		for deadline := time.Now().Add(10 * time.Second); !slices.Equal(pvs(), want) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		if got := pvs(); !slices.Equal(got, want) {
			t.Errorf("endpoint %q: PVs %v, want %v", endpoint, got, want)
		}
		time.Sleep(200 * time.Millisecond) // a PV for the CSI class's claim would be made by now
		if got := pvs(); !slices.Equal(got, want) {
			t.Errorf("endpoint %q: PVs %v, want %v", endpoint, got, want)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
