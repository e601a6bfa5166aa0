package hostpath

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/procpool"
)

// ServerArg, as the first argument of the agent's binary, makes the
// process a long-lived checker (see RunServer), one of the pool the agent
// checks host paths in: a process per check, as CheckerArg makes, costs a
// fork and an exec per volume; a pool of them, none. The reason for a
// process is CheckerArg's.
const ServerArg = "host-path-checker"

// Checkers checks host paths in long-lived checker processes: a
// procpool.Pool whose children run RunServer.
type Checkers interface {
	Do(ctx context.Context, req []byte, release func()) ([]byte, error)
}

var _ Checkers = (*procpool.Pool)(nil)

// RunServer is the long-lived checker process's main: it answers the check
// requests read from r on w until r ends (the agent closed its end of the
// pipe, or died), then returns 0; 2 for malformed input.
func RunServer(r io.Reader, w io.Writer) int {
	if err := procpool.Serve(r, w, Answer); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", ServerArg, err)
		return 2
	}
	return 0
}

// A request is the host root, the hostPath type and the host path,
// separated by NUL bytes (which no path holds). An answer is one status
// byte, then the error's text for statusFailed and statusRefused.
const (
	statusOK      = 0 // the check passed
	statusFailed  = 1 // the check failed: RunChecker's exit code 1
	statusRefused = 2 // a malformed request: RunChecker's exit code 2
)

func request(hostRoot string, typ v1.HostPathType, host string) []byte {
	return []byte(hostRoot + "\x00" + string(typ) + "\x00" + host)
}

// Answer checks the host path of req as RunChecker does: a checker
// process's answer to a host path request.
func Answer(req []byte) []byte {
	fields := bytes.Split(req, []byte{0})
	if len(fields) != 3 {
		return append([]byte{statusRefused}, "a request has 3 fields"...)
	}
	check, ok := checks[v1.HostPathType(fields[1])]
	if !ok {
		return append([]byte{statusRefused}, fmt.Sprintf("hostPath.type %q is not a known type", fields[1])...)
	}
	if err := checkIn(string(fields[0]), check, string(fields[2])); err != nil {
		return append([]byte{statusFailed}, err.Error()...)
	}
	return []byte{statusOK}
}

// askChecker checks the host path host of type typ in one of p.Checkers,
// calling end once no process works on it any more.
func (p *Plugin) askChecker(ctx context.Context, typ v1.HostPathType, host string, end func()) error {
	a, err := p.Checkers.Do(ctx, request(p.HostRoot, typ, host), end)
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("gave up waiting for storage: %w", ctx.Err())
	case errors.Is(err, procpool.ErrNoAnswer):
		return fmt.Errorf("storage did not answer: %w", err)
	case err != nil:
		return fmt.Errorf("ask a host path checker: %w", err)
	case len(a) == 1 && a[0] == statusOK:
		return nil
	case len(a) > 1 && a[0] == statusFailed:
		return errors.New(string(a[1:]))
	case len(a) > 1 && a[0] == statusRefused:
		return fmt.Errorf("the host path checker refused the request: %s", a[1:])
	}
	return fmt.Errorf("the host path checker answered %q", a)
}
