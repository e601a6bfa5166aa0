package csi

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/volume-agent/volume-agent/test/controlplane"
)

// TestBinariesReportTheirVersion runs every program with --version: each
// is the upstream program (it prints its own name) stamped with the version
// of its module that the helper module selects.
func TestBinariesReportTheirVersion(t *testing.T) {
	dir := Binaries(t)
	src, err := sourceDir()
	if err != nil {
		t.Fatal(err)
	}
	versions, err := moduleVersions(context.Background(), filepath.Join(src, helperModule), All)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range All {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		path := filepath.Join(dir, b.Name)
		out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("%s --version: %v\n%s", b.Name, err, out)
			continue
		}
		if want := path + " " + versions[b.Module]; strings.TrimSpace(string(out)) != want {
			t.Errorf("%s --version printed %q, want %q", b.Name, out, want)
		}
	}
}

// TestImagesHoldTheStaticBinary checks each image: its entrypoint is the
// program at the root, as in the upstream images, and it holds exactly that
// binary (same size, executable) and a world-writable /tmp.
func TestImagesHoldTheStaticBinary(t *testing.T) {
	dir := Binaries(t)
	images := Images(t)
	if len(images) != len(All) {
		t.Fatalf("Images() returned %d images, want %d", len(images), len(All))
	}
	if one := Images(t, Resizer); len(one) != 1 || one[ImageRef(Resizer)] == nil {
		t.Errorf("Images(t, Resizer) returned %v, want only %s", one, ImageRef(Resizer))
	}
	for _, b := range All {
		img, ok := images[ImageRef(b)]
		if !ok {
			t.Errorf("no image %s", ImageRef(b))
			continue
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"/" + b.Name}; !reflect.DeepEqual(cfg.Config.Entrypoint, want) {
			t.Errorf("%s: entrypoint %q, want %q", ImageRef(b), cfg.Config.Entrypoint, want)
		}
		fi, err := os.Stat(filepath.Join(dir, b.Name))
		if err != nil {
			t.Fatal(err)
		}
		files := imageFiles(t, mutate.Extract(img))
		want := map[string]string{"tmp": "dir 1777 size 0", b.Name: fmt.Sprintf("file 755 size %d", fi.Size())}
		if !reflect.DeepEqual(files, want) {
			t.Errorf("%s holds %v, want %v", ImageRef(b), files, want)
		}
	}
}

// imageFiles describes a flattened image's entries: type, mode and size.
func imageFiles(t *testing.T, r io.ReadCloser) map[string]string {
	t.Helper()
	defer r.Close()
	files := map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		kind := "file"
		if h.Typeflag != tar.TypeReg {
			kind = "dir"
			if h.Typeflag != tar.TypeDir {
				kind = fmt.Sprintf("type %q", h.Typeflag)
			}
		}
		files[strings.TrimSuffix(h.Name, "/")] = fmt.Sprintf("%s %o size %d", kind, h.Mode&0o7777, h.Size)
	}
}

var (
	volumeSnapshots        = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	volumeSnapshotContents = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
)

// TestSnapshotControllerOnControlPlane proves the supply against a real API
// server: the snapshot-controller refuses to run without the CRDs, the CRDs
// install and are served, and then the controller runs and binds a
// pre-provisioned VolumeSnapshot to its VolumeSnapshotContent, which only
// it does. Meanwhile csi-provisioner, pointed at a socket with no driver
// behind it, keeps trying to reach that socket rather than doing anything.
func TestSnapshotControllerOnControlPlane(t *testing.T) {
	Binaries(t) // build outside the control plane's lifetime
	cp := controlplane.Start(t, controlplane.Options{})

	socket := filepath.Join(t.TempDir(), "csi.sock")
	provisioner := Run(t, Provisioner, nil, "--csi-address="+socket, "--kubeconfig="+cp.AdminKubeconfig())

	_, err := startSnapshotController(t, cp, "--retry-crd-interval-max=1s")
	if err == nil || !strings.Contains(err.Error(), "failure to ensure CRDs exist") {
		t.Fatalf("snapshot-controller without the snapshot CRDs: %v, want it to exit saying the CRDs are missing", err)
	}

	InstallSnapshotCRDs(t, cp)
	resources, err := cp.Client().Discovery().ServerResourcesForGroupVersion("snapshot.storage.k8s.io/v1")
	if err != nil {
		t.Fatalf("discovery of snapshot.storage.k8s.io/v1: %v", err)
	}
	var kinds []string
	for _, r := range resources.APIResources {
		if !strings.Contains(r.Name, "/") {
			kinds = append(kinds, r.Kind)
		}
	}
	if want := []string{"VolumeSnapshot", "VolumeSnapshotClass", "VolumeSnapshotContent"}; !sameSet(kinds, want) {
		t.Fatalf("snapshot.storage.k8s.io/v1 serves %v, want %v", kinds, want)
	}

	StartSnapshotController(t, cp)
	client, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	bindPreProvisioned(t, client)

	waitLog(t, provisioner, "Still connecting", socket)
}

// bindPreProvisioned creates a VolumeSnapshotContent for an existing
// snapshot and the VolumeSnapshot naming it, and waits until the
// snapshot-controller has bound them: the snapshot's status names the
// content and the content's reference carries the snapshot's UID.
func bindPreProvisioned(t *testing.T, client dynamic.Interface) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	content := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
		"metadata": map[string]any{"name": "content-1"},
		"spec": map[string]any{
			"deletionPolicy":    "Retain",
			"driver":            "local.volume-agent.io",
			"source":            map[string]any{"snapshotHandle": "snap-1"},
			"volumeSnapshotRef": map[string]any{"namespace": "default", "name": "snap-1"},
		},
	}}
	if _, err := client.Resource(volumeSnapshotContents).Create(ctx, content, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create VolumeSnapshotContent: %v", err)
	}
	snap := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": "snap-1", "namespace": "default"},
		"spec":     map[string]any{"source": map[string]any{"volumeSnapshotContentName": "content-1"}},
	}}
	created, err := client.Resource(volumeSnapshots).Namespace("default").Create(ctx, snap, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create VolumeSnapshot: %v", err)
	}
	var last string
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		s, err := client.Resource(volumeSnapshots).Namespace("default").Get(ctx, "snap-1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c, err := client.Resource(volumeSnapshotContents).Get(ctx, "content-1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		bound, _, _ := unstructured.NestedString(s.Object, "status", "boundVolumeSnapshotContentName")
		uid, _, _ := unstructured.NestedString(c.Object, "spec", "volumeSnapshotRef", "uid")
		last = "status.boundVolumeSnapshotContentName=" + bound + ", content's spec.volumeSnapshotRef.uid=" + uid
		return bound == "content-1" && uid == string(created.GetUID()), nil
	})
	if err != nil {
		t.Fatalf("the snapshot-controller did not bind VolumeSnapshot default/snap-1 to content-1: %v (%s)", err, last)
	}
}

// waitLog waits until a line of p's log holds every one of words.
func waitLog(t *testing.T, p *Process, words ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		for _, line := range strings.Split(p.Log(), "\n") {
			if containsAll(line, words) {
				return true, nil
			}
		}
		return false, p.ExitErr()
	})
	if err != nil {
		t.Fatalf("%s never logged a line with %q: %v\n%s", p.Name, words, err, p.Tail(20))
	}
}

func containsAll(s string, words []string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

func sameSet(a, b []string) bool {
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		seen[s]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return len(a) == len(b)
}
