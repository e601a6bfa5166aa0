package manifest

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/volume-agent/volume-agent/internal/source/volumesnapshot"
)

const goodSnapshot = "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata: {name: snap, namespace: team}\n" +
	"spec:\n  volumeSnapshotClassName: local\n  source:\n    persistentVolumeClaimName: data\n"

const goodSnapshotClass = "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshotClass\nmetadata: {name: local}\n" +
	"driver: local.volume-agent.io\ndeletionPolicy: Delete\n"

// TestValidateVolumeSnapshots: VolumeSnapshot and VolumeSnapshotClass
// objects are read, and each wrong field is named, with its file, line
// and object, as volume-agent validate shows it.
func TestValidateVolumeSnapshots(t *testing.T) {
	snap := func(spec string) string {
		return "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshot\nmetadata: {name: s}\nspec:\n" + spec
	}
	class := func(rest string) string {
		return "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshotClass\nmetadata: {name: c}\n" + rest
	}
	tests := []struct {
		name, content string
		want          []string // problems, with the file's path left out
	}{
		{"good", goodSnapshot + "---\n" + goodSnapshotClass, nil},
		{"status is ignored", goodSnapshot + "status: {readyToUse: true, restoreSize: 1Gi}\n", nil},
		{"other driver may retain", class("driver: other.example.com\ndeletionPolicy: Retain\n"), nil},
		{"content source", snap("  source: {volumeSnapshotContentName: pre}\n"),
			[]string{`:5: spec.source.volumeSnapshotContentName "pre": a pre-provisioned snapshot (VolumeSnapshotContent) is not supported in manifest mode; name the claim to snapshot in spec.source.persistentVolumeClaimName instead`}},
		{"no source", snap("  source: {}\n"),
			[]string{`:5: spec.source.persistentVolumeClaimName is missing: name the claim (in namespace "default") to snapshot`}},
		{"bad claim name", snap("  source: {persistentVolumeClaimName: Data_1}\n"),
			[]string{`:5: invalid spec.source.persistentVolumeClaimName "Data_1": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},
		{"typo", snap("  source: {persistentVolumeClaimNam: data}\n"),
			[]string{`:5: spec.source.persistentVolumeClaimNam: unknown field (did you mean persistentVolumeClaimName?)`}},
		{"no driver", class("deletionPolicy: Delete\n"),
			[]string{`:1: driver is missing (the agent's is "local.volume-agent.io")`}},
		{"no deletion policy", class("driver: local.volume-agent.io\n"),
			[]string{`:1: deletionPolicy is missing: want Delete or Retain`}},
		{"bad deletion policy", class("driver: local.volume-agent.io\ndeletionPolicy: Keep\n"),
			[]string{`:5: invalid deletionPolicy "Keep": want Delete or Retain`}},
		{"retain", class("driver: local.volume-agent.io\ndeletionPolicy: Retain\n"),
			[]string{`:5: deletionPolicy Retain is not supported for driver "local.volume-agent.io" in manifest mode: a snapshot is deleted once its VolumeSnapshot has stayed removed from the manifests for --reclaim-delay, and one kept without it could be neither restored nor deleted; use Delete, and keep the VolumeSnapshot to keep the snapshot`}},
		{"wrong version", strings.Replace(goodSnapshot, "/v1", "/v1beta1", 1),
			[]string{`:2: unsupported kind "VolumeSnapshot" (apiVersion "snapshot.storage.k8s.io/v1beta1"): only v1 Pod, ConfigMap, Secret, PersistentVolume, PersistentVolumeClaim, Node and List, storage.k8s.io/v1 StorageClass, and snapshot.storage.k8s.io/v1 VolumeSnapshot and VolumeSnapshotClass are read`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "s.yaml", tt.content)
			r, err := Validate(dir)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, w := range tt.want {
				want = append(want, filepath.Join(dir, "s.yaml")+w)
			}
			if !slices.Equal(r.Problems, want) {
				t.Errorf("problems\n%s\nwant\n%s", strings.Join(r.Problems, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// TestParseVolumeSnapshot: the object as the binder gets it: namespace
// defaulted, the manifest's status dropped.
func TestParseVolumeSnapshot(t *testing.T) {
	content := strings.Replace(goodSnapshot, ", namespace: team", "", 1) + "status: {readyToUse: true}\n"
	objs, problems := newParser("n").parseFile("s.yaml", []byte(content))
	if len(problems) != 0 || len(objs) != 1 {
		t.Fatalf("parse: %d objects, problems %v", len(objs), problems)
	}
	s, ok := objs[0].obj.(*volumesnapshot.VolumeSnapshot)
	if !ok {
		t.Fatalf("object is a %T", objs[0].obj)
	}
	if s.Namespace != "default" || s.ClaimName() != "data" || s.ClassName() != "local" || s.Status != nil {
		t.Errorf("snapshot %s/%s of claim %q, class %q, status %v; want default/snap of claim data, class local, no status",
			s.Namespace, s.Name, s.ClaimName(), s.ClassName(), s.Status)
	}
}
