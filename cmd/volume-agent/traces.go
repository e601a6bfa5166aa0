package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/plugins/local"
	"github.com/volume-agent/volume-agent/internal/podrecord"
	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
	"github.com/volume-agent/volume-agent/internal/source/manifest"
)

// localVolumePlugin is the plugin of local PersistentVolumes, whose volumes
// are always a claim's.
const localVolumePlugin = "kubernetes.io/local-volume"

// bindingTraces lists what on disk shows that the binder bound claims
// before: a local PersistentVolume, or a CSI one of the local driver
// (always a claim's), set up for a pod of the manifests, and, without a
// cluster (whose provisioned volumes share it), a volume the local
// provisioner made, or moved aside, or a snapshot it took, under
// localRoot ("" when the local provisioner is off). A pod is the
// manifests' when its record says so, or, without a cluster, when it has
// no record. The binder refuses to start from scratch when its state file
// is missing and this finds any.
func bindingTraces(root layout.Root, localRoot string, cluster bool) ([]string, error) {
	_, found, err := root.Scan()
	if err != nil {
		return nil, err
	}
	recs, err := podrecord.Store{Dir: root.PodRecordsDir()}.Load()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range found {
		source := recs[f.PodUID].Source
		if (f.Plugin == localVolumePlugin || f.Plugin == local.CSIName) && (source == manifest.SourceName || (source == "" && !cluster)) {
			out = append(out, f.Dir)
		}
	}
	if localRoot == "" || cluster {
		return out, nil
	}
	entries, err := os.ReadDir(localRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		// The provisioner's own records (.capacity, .provisioning) are
		// not volumes; a volume aside is.
		if name := e.Name(); !strings.HasPrefix(name, ".") || strings.HasPrefix(name, ".pending-delete-") {
			out = append(out, filepath.Join(localRoot, name))
		}
	}
	// A snapshot the binder took is a trace too: its VolumeSnapshot's
	// record is in the state file.
	snaps, err := os.ReadDir(filepath.Join(localRoot, capacity.SnapshotDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range snaps {
		out = append(out, filepath.Join(localRoot, capacity.SnapshotDir, e.Name()))
	}
	return out, nil
}
