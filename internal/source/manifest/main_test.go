package manifest

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: Run must
// join everything it started.
func TestMain(m *testing.M) {
	if os.Getenv(reportSchemeBuilds) != "" {
		// Started by TestSchemeNotBuiltAtInit: only the package's
		// initialisation has run.
		fmt.Print(schemeBuilds.Load())
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// reportSchemeBuilds, set in the environment, makes the test binary print
// how many times manifestScheme was built and exit before any test.
const reportSchemeBuilds = "MANIFEST_TEST_REPORT_SCHEME_BUILDS"

// TestSchemeNotBuiltAtInit: initialising the package, which every process
// of the agent's binary does (the host path checkers among them), builds
// no scheme; the first parser builds it, once.
func TestSchemeNotBuiltAtInit(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), reportSchemeBuilds+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("test binary: %v", err)
	}
	if string(out) != "0" {
		t.Errorf("builds of the manifest scheme after the package's initialisation: %q, want 0", out)
	}
	newParser("n")
	newParser("n")
	if got := schemeBuilds.Load(); got != 1 {
		t.Errorf("builds after two parsers: %d, want 1", got)
	}
}
