package procpool

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

// The test binary is also the real children of the tests (childArg) and
// an agent that holds some (agentArg).
const (
	childArg = "procpool-test-child"
	agentArg = "procpool-test-agent"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case childArg:
			os.Exit(runChild())
		case agentArg:
			os.Exit(runAgent())
		}
	}
	goleak.VerifyTestMain(m)
}

// runChild answers every request with its pid.
func runChild() int {
	err := Serve(os.Stdin, os.Stdout, func([]byte) []byte { return strconv.AppendInt(nil, int64(os.Getpid()), 10) })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

// runAgent starts a pool, prints the pid of the child that answers its
// request, then waits to be killed.
func runAgent() int {
	p, err := New(Config{Command: childCommand, Stderr: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pid, err := p.Do(context.Background(), []byte("pid?"), func() {})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%s\n", pid)
	select {}
}

var childCommand = []string{"/proc/self/exe", childArg}
