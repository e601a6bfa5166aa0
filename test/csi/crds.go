package csi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/volume-agent/volume-agent/test/controlplane"
	"github.com/volume-agent/volume-agent/test/internal/buildcache"
)

// SnapshotClientModule is the module whose config/crd holds the snapshot
// CRDs; the helper module's go.mod selects its version (the same as the
// snapshot-controller's, v8.7.0) and its go.sum pins its content.
const SnapshotClientModule = "github.com/kubernetes-csi/external-snapshotter/client/v8"

// snapshotCRDFiles are the v1 snapshot CRDs, in the order the upstream
// docs apply them. The group-snapshot CRDs next to them are left out: the
// driver has no group snapshots, and the snapshot-controller is told so
// (see snapshotControllerArgs).
var snapshotCRDFiles = []string{
	"snapshot.storage.k8s.io_volumesnapshotclasses.yaml",
	"snapshot.storage.k8s.io_volumesnapshotcontents.yaml",
	"snapshot.storage.k8s.io_volumesnapshots.yaml",
}

// SnapshotCRDFiles returns the paths of the three v1 snapshot CRDs
// (VolumeSnapshotClass, VolumeSnapshotContent, VolumeSnapshot) in the
// module cache, downloading the client module if it is not there. They are
// read where the go command verified them, never copied into this
// repository.
func SnapshotCRDFiles(t testing.TB) []string {
	t.Helper()
	dir, err := snapshotCRDDir(context.Background())
	if err != nil {
		t.Fatalf("csi: %v", err)
	}
	var paths []string
	for _, f := range snapshotCRDFiles {
		paths = append(paths, filepath.Join(dir, f))
	}
	return paths
}

// snapshotCRDDir returns config/crd of the client module at the version
// the helper module selects.
func snapshotCRDDir(ctx context.Context) (string, error) {
	src, err := sourceDir()
	if err != nil {
		return "", err
	}
	out, err := buildcache.Go(ctx, filepath.Join(src, helperModule), "mod", "download", "-json", SnapshotClientModule)
	if err != nil {
		return "", err
	}
	var mod struct{ Dir, Version, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("go mod download -json %s: %w", SnapshotClientModule, err)
	}
	if mod.Error != "" || mod.Dir == "" {
		return "", fmt.Errorf("download %s: %s", SnapshotClientModule, mod.Error)
	}
	return filepath.Join(mod.Dir, "config", "crd"), nil
}

// SnapshotCRDs returns the three v1 snapshot CRDs, decoded strictly: a
// field this code's apiextensions types do not know is an error rather
// than a CRD applied without it.
func SnapshotCRDs(t testing.TB) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, path := range SnapshotCRDFiles(t) {
		crd, err := readCRD(path)
		if err != nil {
			t.Fatalf("csi: %v", err)
		}
		crds = append(crds, crd)
	}
	return crds
}

func readCRD(path string) (*apiextensionsv1.CustomResourceDefinition, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CRD: %w", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		return nil, fmt.Errorf("decode CRD %s: %w", path, err)
	}
	if crd.Kind != "CustomResourceDefinition" || crd.Name == "" {
		return nil, fmt.Errorf("decode CRD %s: kind %q, name %q: not a CustomResourceDefinition", path, crd.Kind, crd.Name)
	}
	return crd, nil
}

// InstallSnapshotCRDs creates the snapshot CRDs in cp and waits until the
// API server serves each (condition Established). It calls t.Fatal when a
// CRD is refused or not established within crdEstablishTimeout.
func InstallSnapshotCRDs(t testing.TB, cp *controlplane.ControlPlane) {
	t.Helper()
	client, err := apiextensions.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatalf("csi: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), crdEstablishTimeout)
	defer cancel()
	crds := SnapshotCRDs(t)
	for _, crd := range crds {
		_, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("csi: create CRD %s: %v", crd.Name, err)
		}
	}
	for _, crd := range crds {
		if err := waitEstablished(ctx, client, crd.Name); err != nil {
			t.Fatalf("csi: CRD %s: %v", crd.Name, err)
		}
	}
}

// crdEstablishTimeout bounds creating the CRDs and their becoming
// Established, which takes well under a second on a local API server.
const crdEstablishTimeout = time.Minute

// crdPollInterval is how often waitEstablished looks at a CRD.
const crdPollInterval = 200 * time.Millisecond

// waitEstablished waits until the CRD's Established condition is True.
func waitEstablished(ctx context.Context, client apiextensions.Interface, name string) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, crdPollInterval, true, func(ctx context.Context) (bool, error) {
		crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.NamesAccepted && c.Status == apiextensionsv1.ConditionFalse {
				return false, fmt.Errorf("names not accepted: %s", c.Message)
			}
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		last = fmt.Errorf("conditions %v", crd.Status.Conditions)
		return false, nil
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("not established within %s: %w", crdEstablishTimeout, errors.Join(err, last))
	}
	return err
}
