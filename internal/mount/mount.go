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
	"golang.org/x/sys/unix"
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
	// MountsUnder lists the mount points at or below dir: at least one
	// whenever there is any. A mount nested inside a listed one may be
	// left out (it cannot be taken off before the outer one anyway).
	MountsUnder(ctx context.Context, dir string) ([]string, error)
}

// waitDelay bounds how long a killed mount(8) may keep its pipes open.
const waitDelay = 2 * time.Second

// System mounts tmpfs and bind mounts with mount(2), every other type with
// mount(8) (which runs the type's helper, e.g. mount.nfs), and unmounts
// with umount2(2). It tells mount points by mount ID (statx), without
// reading the kernel's mount table: the cost of a call does not grow with
// the node's mounts.
type System struct{}

var _ Mounter = System{}

// Mount mounts m on target: with mount(2) for a tmpfs or a bind mount,
// otherwise with mount(8), its source and target after "--".
func (System) Mount(ctx context.Context, m Mount, target string) error {
	var err error
	if byCall(m) {
		_, err = Bounded(ctx, func() (struct{}, error) { return struct{}{}, mountByCall(m, target) })
	} else {
		err = run(ctx, "mount", mountArgs(m, target)...)
	}
	if err != nil {
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

// Unmount unmounts the mount on target with umount2(2), never following a
// symlink at target. It asks nothing of a helper: the tmpfs, bind and
// device mounts this is used for have none (NFS mounts are taken down by
// UnmountStubborn).
func (System) Unmount(ctx context.Context, target string) error {
	_, err := Bounded(ctx, func() (struct{}, error) {
		return struct{}{}, unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
	})
	if err != nil {
		return fmt.Errorf("unmount %s: %w", target, err)
	}
	return nil
}

// IsMountPoint reports whether path is a mount point, bind mounts of the
// same file system included: its mount ID differs from its parent's. A
// symlink at path is not followed (it is never a mount point), and the
// file system mounted there is not asked (a dead NFS server cannot hang
// the question).
func (System) IsMountPoint(ctx context.Context, path string) (bool, error) {
	return Bounded(ctx, func() (bool, error) { return isMountPoint(path) })
}

// MountsUnder lists the mount points at or below dir that can be reached
// from dir without entering another mount, found by mount ID (see
// scanMounts); mounts nested inside those are not listed. It reads the
// kernel's mount table only for a tree deeper than maxScanDepth.
func (System) MountsUnder(ctx context.Context, dir string) ([]string, error) {
	return Bounded(ctx, func() ([]string, error) {
		found, err := scanMounts(ctx, dir)
		if errors.Is(err, errTooDeep) {
			return mountsInTable(dir)
		}
		return found, err
	})
}

// run executes a mount tool, killing it when ctx ends. A tool stuck in the
// kernel on hung storage cannot be killed and is never reaped until the
// storage answers; run returns at ctx's end all the same (through Bounded),
// and the goroutine waiting for the tool finishes when it does.
func run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...) //nolint:gosec // G204: runs mount(8)/umount(8); arguments are separate argv entries, never a shell
	cmd.WaitDelay = waitDelay
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	_, err := Bounded(ctx, func() (struct{}, error) { return struct{}{}, cmd.Run() })
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if err != nil {
		return fmt.Errorf("%w: %s", err, Fold(out.String()))
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

// BoundedOpen is Bounded for a call that opens something: when the
// caller has given up before the call returns, what it opened is closed
// (by release) rather than left open for ever.
func BoundedOpen[T any](ctx context.Context, open func() (T, error), release func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result) // unbuffered: a send happens only to a caller still there
	go func() {
		v, err := open()
		select {
		case ch <- result{v, err}:
		case <-ctx.Done():
			if err == nil {
				release(v)
			}
		}
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
