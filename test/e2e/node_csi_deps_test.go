package e2e

import (
	"testing"

	"github.com/volume-agent/volume-agent/test/controlplane"
	"github.com/volume-agent/volume-agent/test/csi"
	"github.com/volume-agent/volume-agent/test/node"
)

// csiNodeImages are the images the node imports: the agent's, the tools
// image of the shell pods, and the upstream sidecars' (test/csi, built
// from the Go module proxy). The snapshot-controller runs on the host.
func csiNodeImages(t *testing.T) map[string]node.Image {
	t.Helper()
	images := csi.Images(t, csi.Provisioner, csi.Resizer, csi.Snapshotter)
	agent, err := node.BuildAgentImage(binary)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := node.BuildToolsImage()
	if err != nil {
		t.Fatal(err)
	}
	images[node.AgentImageRef], images[node.ToolsImageRef] = agent, tools
	return images
}

// installSnapshotAPI installs the snapshot CRDs and runs the upstream
// snapshot-controller on the host against the control plane, with
// distributed snapshotting for the node-deployed csi-snapshotter. (The
// chart's optional Deployment of it would get a pod network, from which
// the test cluster's loopback API server cannot be reached.)
func installSnapshotAPI(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	csi.InstallSnapshotCRDs(t, cp)
	csi.StartSnapshotController(t, cp, "--enable-distributed-snapshotting=true")
}

// csiValues are the chart's csi values: on, with the sidecars' images as
// imported into the node, and the VolumeSnapshotClass (the snapshot CRDs
// installed first: installSnapshotAPI).
func csiValues() map[string]any {
	v := csiImageValues()
	v["snapshotClass"] = map[string]any{"create": true}
	return v
}

// csiImageValues are the chart's csi values that only point the sidecars
// at the images imported into the node; everything else is the chart's
// default (the driver on, no VolumeSnapshotClass).
func csiImageValues() map[string]any {
	return map[string]any{
		"enabled":     true,
		"provisioner": map[string]any{"image": csi.ImageRef(csi.Provisioner)},
		"resizer":     map[string]any{"image": csi.ImageRef(csi.Resizer)},
		"snapshotter": map[string]any{"image": csi.ImageRef(csi.Snapshotter)},
	}
}
