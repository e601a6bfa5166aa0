package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/plugins/local"
	"github.com/volume-agent/volume-agent/internal/podrecord"
)

func TestBindingTraces(t *testing.T) {
	root := layout.Root(t.TempDir())
	localRoot := t.TempDir()
	mkdir := func(p string) {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	manifestPV := root.VolumeDir("m", localVolumePlugin, "pv-m")
	apiPV := root.VolumeDir("a", localVolumePlugin, "pv-a")
	unknownPV := root.VolumeDir("u", localVolumePlugin, "pv-u")
	manifestCSI := root.VolumeDir("m", local.CSIName, "pv-c")
	apiCSI := root.VolumeDir("a", local.CSIName, "pv-d")
	mkdir(manifestPV)
	mkdir(manifestCSI)
	mkdir(apiCSI)
	mkdir(apiPV)
	mkdir(unknownPV)
	mkdir(root.VolumeDir("m", "kubernetes.io/empty-dir", "scratch"))
	records := podrecord.Store{Dir: root.PodRecordsDir()}
	for uid, src := range map[string]string{"m": "manifests", "a": "api"} {
		if err := records.Write(podrecord.Record{UID: podUID(uid), Namespace: "ns", Name: uid, Source: src}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"default-data-pv-1", ".pending-delete-pv-2", ".capacity", ".provisioning", ".csi", ".snapshots/snapshot-1"} {
		mkdir(filepath.Join(localRoot, name))
	}
	for _, tc := range []struct {
		name      string
		localRoot string
		cluster   bool
		want      []string
	}{
		{"manifest mode", localRoot, false, []string{manifestPV, manifestCSI, unknownPV, filepath.Join(localRoot, ".pending-delete-pv-2"),
			filepath.Join(localRoot, "default-data-pv-1"), filepath.Join(localRoot, ".snapshots", "snapshot-1")}},
		{"manifest mode, no local provisioner", "", false, []string{manifestPV, manifestCSI, unknownPV}},
		{"beside a cluster: its pods and volumes are no trace", localRoot, true, []string{manifestPV, manifestCSI}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := bindingTraces(root, tc.localRoot, tc.cluster)
			slices.Sort(got)
			slices.Sort(tc.want)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("bindingTraces = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func podUID(s string) types.UID { return types.UID(s) }
