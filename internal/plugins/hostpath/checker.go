package hostpath

import (
	"context"
	"errors"
	"fmt"
	"github.com/volume-agent/volume-agent/internal/hostroot"
	"os"
	"os/exec"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// CheckerArg, as the first argument of the agent's binary, makes the
// process a checker: it checks one host path and exits (see RunChecker).
//
// Why a process: a host path can lie on any file system, a FUSE one
// included. A thread waiting on a FUSE request that the server has read
// but never answers cannot be killed (the kernel waits for the answer), and
// a process exits only when all its threads do. Checked by a thread of the
// agent, such a path would keep the agent from ever exiting; checked by a
// child, it holds only the child, which the agent leaves behind.
const CheckerArg = "check-host-path"

// RunChecker is the checker process's main: its arguments are the host
// root, the hostPath type and the host path. It checks (or creates) the
// path as SetUp does, and exits with 0, or with 1 after writing the error
// to standard error, or with 2 for bad arguments.
func RunChecker(args []string) int {
	if len(args) != 3 {
		fmt.Fprintf(os.Stderr, "usage: %s HOST-ROOT TYPE PATH\n", CheckerArg)
		return 2
	}
	check, ok := checks[v1.HostPathType(args[1])]
	if !ok {
		fmt.Fprintf(os.Stderr, "hostPath.type %q is not a known type\n", args[1])
		return 2
	}
	if err := checkIn(args[0], check, args[2]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// checkIn runs check on the host path p inside hostRoot.
func checkIn(hostRoot string, check check, p string) error {
	r, err := hostroot.Open(hostRoot)
	if err != nil {
		return err
	}
	defer r.Close()
	return check(r, p)
}

// runChecker checks the host path p of type typ in a checker process
// started with p.Checker. The caller bounds it with mount.Bounded: once ctx
// ends the child is killed, which takes effect only when the storage
// answers, and the goroutine waiting for it is left to finish then.
func (p *Plugin) runChecker(ctx context.Context, typ v1.HostPathType, host string) error {
	args := append(p.Checker[1:len(p.Checker):len(p.Checker)], p.HostRoot, string(typ), host)
	_, err := exec.CommandContext(ctx, p.Checker[0], args...).Output() //nolint:gosec // G204: re-executes the agent's own binary; the path is one argv entry, never a shell
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return errors.New(strings.TrimSpace(string(exit.Stderr)))
	case err != nil:
		return fmt.Errorf("run host path checker: %w", err)
	}
	return nil
}
