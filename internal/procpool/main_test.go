package procpool

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
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

// runChild answers every request with its pid; with a socket for
// descriptors, "file?" with "/" opened, passed with the answer.
func runChild() int {
	pid := func([]byte) []byte { return strconv.AppendInt(nil, int64(os.Getpid()), 10) }
	var err error
	if sock := os.NewFile(FilesFD, "files"); sock != nil && len(os.Args) > 2 {
		err = ServeFiles(os.Stdin, os.Stdout, sock, func(req []byte) ([]byte, int) {
			if string(req) != "file?" {
				return pid(req), -1
			}
			fd, err := syscall.Open("/", 0x200000 /* O_PATH */ |syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
			if err != nil {
				return []byte(err.Error()), -1
			}
			return []byte("root"), fd
		}, func(err error) []byte { return []byte(err.Error()) })
	} else {
		err = Serve(os.Stdin, os.Stdout, pid)
	}
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

// filesChildCommand is a child that passes descriptors.
var filesChildCommand = []string{"/proc/self/exe", childArg, "files"}
