package hostpath_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
	"github.com/volume-agent/volume-agent/internal/procpool"
)

// TestMain also makes this test binary a checker process, as the agent's
// binary is, for the plugins of checkModes.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == hostpath.CheckerArg {
		os.Exit(hostpath.RunChecker(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == hostpath.ServerArg {
		os.Exit(hostpath.RunServer(os.Stdin, os.Stdout))
	}
	goleak.VerifyTestMain(closingPool{m})
}

// pool is a pool of checker processes started from this binary, as the
// agent starts its own.
var pool = func() *procpool.Pool {
	p, err := procpool.New(procpool.Config{Command: []string{"/proc/self/exe", hostpath.ServerArg}, Stderr: os.Stderr})
	if err != nil {
		panic(err)
	}
	return p
}()

// closingPool closes pool once the tests have run, before goleak looks.
type closingPool struct{ m *testing.M }

func (c closingPool) Run() int {
	defer pool.Close()
	return c.m.Run()
}

// checkModes are the ways to check a host path: in the process, in a
// checker process started from this binary per check, and in a pool of
// long-lived ones, as the agent does.
var checkModes = []struct {
	name     string
	checker  []string
	checkers hostpath.Checkers
}{
	{"in process", nil, nil},
	{"checker process", []string{"/proc/self/exe", hostpath.CheckerArg}, nil},
	{"checker pool", nil, pool},
}
