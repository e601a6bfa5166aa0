package mount

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	mountutils "k8s.io/mount-utils"
)

// Mount describes one mount: what to mount, not where.
type Mount struct {
	Type    string   // file system type, e.g. "tmpfs"
	Source  string   // e.g. "tmpfs", "server:/export", or a directory for bind mounts
	Options []string // mount options, e.g. "size=64m", "bind", "ro"
}

// String renders the mount for logs and errors.
func (m Mount) String() string {
	return fmt.Sprintf("%s %s (%s)", m.Type, m.Source, strings.Join(m.Options, ","))
}

// Mounter performs mounts. Implementations must honour ctx deadlines.
type Mounter interface {
	Mount(ctx context.Context, m Mount, target string) error
	Unmount(ctx context.Context, target string) error
	IsMountPoint(ctx context.Context, path string) (bool, error)
	// MountsUnder lists the mount points at or below dir.
	MountsUnder(ctx context.Context, dir string) ([]string, error)
}

// waitDelay bounds how long a killed mount(8) may keep its pipes open.
const waitDelay = 2 * time.Second

// System mounts with mount(8) and umount(8) and reads the kernel's mount table.
type System struct{}

var _ Mounter = System{}

// Mount runs mount(8). The source and target follow "--".
func (System) Mount(ctx context.Context, m Mount, target string) error {
	args := mountArgs(m, target)
	if err := run(ctx, "mount", args...); err != nil {
		return fmt.Errorf("mount %s on %s: %w", m, target, err)
	}
	return nil
}

// mountArgs builds mount(8)'s argv: -t TYPE [-o OPTS] -- SOURCE TARGET.
func mountArgs(m Mount, target string) []string {
	args := []string{"-t", m.Type}
	if len(m.Options) > 0 {
		args = append(args, "-o", strings.Join(m.Options, ","))
	}
	return append(args, "--", m.Source, target)
}

// Unmount runs umount(8) on target.
func (System) Unmount(ctx context.Context, target string) error {
	if err := run(ctx, "umount", "--", target); err != nil {
		return fmt.Errorf("unmount %s: %w", target, err)
	}
	return nil
}

// IsMountPoint reports whether path is a mount point, bind mounts included.
func (System) IsMountPoint(ctx context.Context, path string) (bool, error) {
	return Bounded(ctx, func() (bool, error) {
		return mountutils.New("").IsMountPoint(path)
	})
}

// MountsUnder lists the mount points at or below dir, deepest first.
func (System) MountsUnder(ctx context.Context, dir string) ([]string, error) {
	return Bounded(ctx, func() ([]string, error) {
		infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
		if err != nil {
			return nil, fmt.Errorf("read mount table: %w", err)
		}
		paths := make([]string, 0, len(infos))
		for i := len(infos) - 1; i >= 0; i-- {
			paths = append(paths, infos[i].Mountpoint)
		}
		return paths, nil
	})
}

// run executes a mount tool, killing it when ctx ends. A tool stuck in the
// kernel on hung storage cannot be killed and is never reaped until the
// storage answers; run returns at ctx's end all the same (through Bounded),
// and the goroutine waiting for the tool finishes when it does.
func run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = waitDelay
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	_, err := Bounded(ctx, func() (struct{}, error) { return struct{}{}, cmd.Run() })
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Bounded runs fn, which touches storage, on its own goroutine and gives up
// when ctx ends; a call stuck in the kernel (a stat on a dead NFS server)
// then finishes, or not, without holding the caller.
func Bounded[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := fn()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("gave up waiting for storage: %w", ctx.Err())
	}
}

// ErrMountPointsRemain is returned by RemoveAll when a mount lies below the tree.
var ErrMountPointsRemain = errors.New("mount points remain")

// Unprivileged is the mounter of the degraded mode for running without
// root: it mounts nothing. A tmpfs "mount" succeeds without mounting, so
// memory-backed emptyDir, secret and projected volumes end up on disk; any
// other mount fails. Plugins also give up fsGroup ownership (see Privileged).
type Unprivileged struct{ System }

// Privileged reports whether the agent runs with the privileges to mount
// and to change file ownership: false only for Unprivileged.
func Privileged(m Mounter) bool {
	_, unprivileged := m.(Unprivileged)
	return !unprivileged
}

// Mount skips tmpfs mounts and refuses every other mount.
func (Unprivileged) Mount(_ context.Context, m Mount, target string) error {
	if m.Type == "tmpfs" {
		return nil
	}
	return fmt.Errorf("mount %s on %s: mounting needs root (running with --unprivileged)", m, target)
}

// MountedByTable reports whether dir is a mount point, from the kernel's
// mount table only: nothing is asked of the file system mounted there, so
// a dead NFS server cannot hang the question.
func MountedByTable(ctx context.Context, dir string) (bool, error) {
	return Bounded(ctx, func() (bool, error) {
		infos, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
		if err != nil {
			return false, fmt.Errorf("read mount table: %w", err)
		}
		return len(infos) > 0, nil
	})
}
