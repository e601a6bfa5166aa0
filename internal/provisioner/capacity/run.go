package capacity

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/volume-agent/volume-agent/internal/mount"
)

// waitDelay bounds how long a killed tool may keep its pipes open.
const waitDelay = 2 * time.Second

// runner runs the external tools (btrfs, losetup, mkfs.ext4, resize2fs,
// blkid), each with its own deadline.
type runner struct{ timeout time.Duration }

// toolError is a tool's failure: its exit status and what it said.
type toolError struct {
	cmd    string
	code   int
	stderr string
	err    error
}

func (e *toolError) Error() string {
	if e.stderr == "" {
		return fmt.Sprintf("%s: %v", e.cmd, e.err)
	}
	return fmt.Sprintf("%s: %v: %s", e.cmd, e.err, e.stderr)
}

func (e *toolError) Unwrap() error { return e.err }

// run runs name with args as argv (never through a shell) and returns
// its standard output. A tool stuck in the kernel is given up on at the
// deadline (mount.Bounded), like a stuck mount.
func (r runner) run(ctx context.Context, name string, args ...string) (string, error) {
	crashPoint()
	defer crashPoint()
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...) //nolint:gosec // G204: fixed tool names; names and paths are separate argv entries, never a shell
	cmd.WaitDelay = waitDelay
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_, err := mount.Bounded(ctx, func() (struct{}, error) { return struct{}{}, cmd.Run() })
	line := name + " " + strings.Join(args, " ")
	if ctxErr := ctx.Err(); ctxErr != nil {
		// The tool may still run: its buffers are not ours to read.
		return "", &toolError{cmd: line, code: -1, err: ctxErr}
	}
	if err != nil {
		code := -1
		if cmd.ProcessState != nil {
			code = cmd.ProcessState.ExitCode()
		}
		return stdout.String(), &toolError{cmd: line, code: code, stderr: mount.Fold(stderr.String()), err: err}
	}
	return stdout.String(), nil
}
