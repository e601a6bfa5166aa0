package hostpath_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
)

// TestMain also makes this test binary a checker process, as the agent's
// binary is, for the plugins of checkModes.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == hostpath.CheckerArg {
		os.Exit(hostpath.RunChecker(os.Args[2:]))
	}
	goleak.VerifyTestMain(m)
}

// checkModes are the two ways to check a host path: in the process, and
// in a checker process started from this binary as the agent does.
var checkModes = []struct {
	name    string
	checker []string
}{
	{"in process", nil},
	{"checker process", []string{"/proc/self/exe", hostpath.CheckerArg}},
}
