package local

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const node = "node-a"

// newProvisioner makes a provisioner on root, with its logs observed.
func newProvisioner(t *testing.T, root string) (*Provisioner, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	p, err := New(Config{Root: root, NodeName: node, Mounter: mount.System{}, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	return p, logs
}

// request is a request for the claim ns/name of 5Gi, selected for node,
// of a class of plain directories (enforce "false") with the given
// archiveOnDelete ("" for none).
func request(name, archive string) provisioner.Request {
	claim := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("5Gi")}},
		},
	}
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: provisioner.LocalName,
		Parameters: map[string]string{ParamEnforce: "false"}}
	if archive != "" {
		class.Parameters[provisioner.ParamArchiveOnDelete] = archive
	}
	return provisioner.Request{Claim: claim, Class: class, PVName: provisioner.PVName(claim), SelectedNode: node}
}

// provision provisions req and returns the PV the controller would create.
func provision(t *testing.T, p *Provisioner, req provisioner.Request) *v1.PersistentVolume {
	t.Helper()
	vol, err := p.Provision(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	return provisioner.NewPV(req, provisioner.LocalName, vol)
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a real tmpfs")
	}
}

// entries lists the names in dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func mustWrite(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
}
