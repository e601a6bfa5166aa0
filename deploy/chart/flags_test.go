package chart

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentAcceptsTheChartsFlags runs the agent built from this tree with
// the arguments the chart gives its container, plus --version: the agent
// parses every flag (an unknown one, or a value of the wrong type, exits 2
// naming it) and then prints its version instead of starting. So a flag the
// chart passes and the agent lacks fails here, not on every node.
func TestAgentAcceptsTheChartsFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build the agent: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "volume-agent")
	if out, err := exec.Command(goCmd, "build", "-o", bin, "github.com/volume-agent/volume-agent/cmd/volume-agent").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/volume-agent: %v\n%s", err, out)
	}
	for _, values := range []string{
		"",
		noCSIValues,
		provisionerValues,
		provisionerValues + "\n" + noCSIValues,
		"identity: serviceAccount\nmintTokens: false\nmetricsAddr: 0.0.0.0:9811\nstatusSocketGroup: \"4242\"",
		"csi: {enabled: true}",
		csiValues,
		everyValueSet,
	} {
		args := stringsOf(container(render(t, DefaultRelease, readValues(t, values)))["args"])
		out, err := exec.Command(bin, append(args, "--version")...).CombinedOutput()
		if err != nil {
			t.Errorf("values %q: volume-agent %s --version: %v\n%s", values, strings.Join(args, " "), err, out)
		}
	}
}
