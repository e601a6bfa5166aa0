package binder

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/source/manifest"
)

var _ Inner = (*manifest.Source)(nil)

const manifests = `apiVersion: v1
kind: Node
metadata:
  name: node-1
  labels: {zone: a}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: local-big}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: local
  local: {path: /mnt/big}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [node-1]}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: local-other-zone}
spec:
  capacity: {storage: 2Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: local
  local: {path: /mnt/small}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: zone, operator: In, values: [b]}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: local
  resources:
    requests: {storage: 1Gi}
---
` + podWeb

// podWeb is a pod that uses claim data.
const podWeb = `apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - {name: app, image: nginx}
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: data}
`

// The binder wraps the manifest source as cmd/ wires it: the manifest
// source's OnChange calls Notify.
func TestWrapsTheManifestSource(t *testing.T) {
	b := runOnManifests(t, manifests, nil)
	c, err := b.Objects().PersistentVolumeClaim("default", "data")
	if err != nil || c.Status.Phase != v1.ClaimBound || c.Spec.VolumeName != "local-big" {
		t.Fatalf("claim %+v, %v; want Bound to local-big (local-other-zone is smaller, but for zone b)", c, err)
	}
	if len(b.Pods()) != 1 || b.Node() == nil || b.Name() != "manifests" {
		t.Errorf("pods, node or name not passed through")
	}
}

const dynamicManifests = `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: dynamic}
provisioner: test.io/fake
volumeBindingMode: Immediate
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: dynamic
  resources:
    requests: {storage: 1Gi}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: idle}
spec: {accessModes: [ReadWriteOnce], storageClassName: dynamic, resources: {requests: {storage: 1Gi}}}
---
` + podWeb

// A claim of a StorageClass in the manifests is provisioned once a pod uses
// it, even with volumeBindingMode Immediate; a manifest claim has no UID,
// so its PersistentVolume is named after its namespace and name.
func TestProvisionsManifestClaims(t *testing.T) {
	prov := &fakeProvisioner{}
	b := runOnManifests(t, dynamicManifests, prov)
	deadline := time.After(within)
	for !b.Status().Synced || b.Claims()[0].Phase != PhaseBound {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-deadline:
			t.Fatalf("not bound within %v: %+v", within, b.Claims())
		}
	}
	want, _ := pvNameFor(newClaim("data", "1Gi"), "node-1")
	c, err := b.Objects().PersistentVolumeClaim("default", "data")
	if err != nil || c.Spec.VolumeName != want {
		t.Fatalf("claim %+v, %v; want Bound to %s", c, err, want)
	}
	if pv, err := b.Objects().PersistentVolume(want); err != nil || pv.Status.Phase != v1.VolumeBound || pv.Spec.ClaimRef.Name != "data" {
		t.Errorf("provisioned PV %+v, %v", pv, err)
	}
	if made, _ := prov.calls(); !slices.Equal(made, []string{want}) {
		t.Errorf("provisioned %v, want only %s (claim idle has no pod)", made, want)
	}
}

// runOnManifests runs a binder on a manifest source reading content, with
// provisioner p if not nil, until the test ends, and waits until it synced.
func runOnManifests(t *testing.T, content string, p *fakeProvisioner) *Source {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "all.yaml")
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Minute) // settled: not half-written
	if err := os.Chtimes(file, old, old); err != nil {
		t.Fatal(err)
	}
	var b *Source
	src, err := manifest.New(manifest.Config{Dir: dir, NodeName: "node-1", Logger: zap.NewNop(), Resync: time.Hour,
		OnChange: func() { b.Notify() }})
	if err != nil {
		t.Fatal(err)
	}
	var provs []provisioner.Provisioner
	if p != nil {
		provs = append(provs, p)
	}
	changes := make(chan struct{}, 1)
	b, err = New(Config{Inner: src, StatePath: filepath.Join(t.TempDir(), "claims.json"), NodeName: "node-1",
		Logger: zap.NewNop(), Provisioners: provs, OnChange: func() {
			select {
			case changes <- struct{}{}:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	deadline := time.After(within)
	for !b.Status().Synced {
		select {
		case <-changes:
		case <-deadline:
			t.Fatalf("not synced within %v: %+v", within, b.Status())
		}
	}
	return b
}
