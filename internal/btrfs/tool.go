package btrfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/volume-agent/volume-agent/internal/mount"
)

// DefaultTimeout is Tool.Timeout's default.
const DefaultTimeout = 30 * time.Second

// waitDelay bounds how long a killed btrfs(8) may keep its pipes open.
const waitDelay = 2 * time.Second

// Categories of failures of btrfs(8), matched with errors.Is on an *Error
// by what btrfs(8) said.
var (
	// ErrQuotasOff: quotas are not enabled on the file system.
	ErrQuotasOff = errors.New("btrfs quotas are not enabled")
	// ErrNotEmpty: a subvolume holding another one cannot be deleted.
	ErrNotEmpty = errors.New("btrfs subvolume holds another subvolume")
)

// Tool runs btrfs(8). Its zero value is ready to use.
type Tool struct {
	// Timeout bounds each run; default DefaultTimeout.
	Timeout time.Duration
	// Hook, when set, is called before and after each run: the points
	// where a crash can cut a caller's step short (its crash tests kill
	// the process there).
	Hook func()
}

// Error is a failed run of btrfs(8): the command line and what it said on
// standard error, in one line.
type Error struct {
	Cmd    string
	Stderr string
	Err    error
}

func (e *Error) Error() string {
	if e.Stderr == "" {
		return fmt.Sprintf("%s: %v", e.Cmd, e.Err)
	}
	return fmt.Sprintf("%s: %v: %s", e.Cmd, e.Err, e.Stderr)
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches the categories by what btrfs(8) said.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrQuotasOff:
		return strings.Contains(e.Stderr, "not enabled")
	case ErrNotEmpty:
		return strings.Contains(e.Stderr, "Directory not empty")
	}
	return false
}

// Run runs btrfs with args as argv (never through a shell) within the
// timeout and returns its standard output. A btrfs(8) stuck in the kernel
// is given up on at the deadline (mount.Bounded), like a stuck mount.
func (t Tool) Run(ctx context.Context, args ...string) (string, error) {
	if t.Hook != nil {
		t.Hook()
		defer t.Hook()
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout())
	defer cancel()
	cmd := exec.CommandContext(ctx, "btrfs", args...) //nolint:gosec // G204: a fixed tool; paths are separate, absolute argv entries
	cmd.WaitDelay = waitDelay
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_, err := mount.Bounded(ctx, func() (struct{}, error) { return struct{}{}, cmd.Run() })
	line := "btrfs " + strings.Join(args, " ")
	if ctxErr := ctx.Err(); ctxErr != nil {
		// btrfs(8) may still run: its buffers are not ours to read.
		return "", &Error{Cmd: line, Err: ctxErr}
	}
	if err != nil {
		return stdout.String(), &Error{Cmd: line, Stderr: mount.Fold(stderr.String()), Err: err}
	}
	return stdout.String(), nil
}

// timeout is Timeout or its default.
func (t Tool) timeout() time.Duration {
	if t.Timeout <= 0 {
		return DefaultTimeout
	}
	return t.Timeout
}

// absolute refuses a relative path, which btrfs(8) could read as an
// option.
func absolute(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("btrfs: path %q is not absolute", path)
	}
	return nil
}
