// Package hostpath implements hostPath volumes. As in the kubelet nothing is
// mounted: the host path is checked against the volume's type (and created
// for DirectoryOrCreate and FileOrCreate) and reported as the volume's path.
// Host paths are resolved inside the host root as the host's kernel would
// resolve them, symlinks included (see internal/hostroot). The agent checks them in a
// pool of long-lived checker processes (see ServerArg and internal/procpool),
// so that a host path on storage that stopped answering holds that child,
// which the agent abandons, and never the agent.
//
// It never modifies or deletes anything that exists on the host path, and
// never creates anything outside the host root.
package hostpath

import (
	"context"
	"errors"
	"fmt"
	"github.com/volume-agent/volume-agent/internal/hostroot"
	"github.com/volume-agent/volume-agent/internal/inflight"
	"io/fs"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/procpool"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Name is the plugin's kubelet name.
const Name = "kubernetes.io/host-path"

// Plugin checks hostPath volumes.
type Plugin struct {
	// HostRoot is where the host's root file system is visible to the agent:
	// "/" (or "") on the host itself, e.g. "/host" in a container. Paths are
	// resolved inside it, with absolute symlinks and ".." kept inside it, and
	// reported as host paths.
	HostRoot string
	// Checker, when set, is the command that starts a checker process
	// (CheckerArg): the agent's binary, then CheckerArg. Each host path is
	// then checked in a child, so that a path on hung storage can never
	// keep the agent from exiting. Unset, paths are checked in process.
	Checker []string
	// Checkers, when set, checks host paths in long-lived checker
	// processes (see ServerArg), in place of Checker: the same protection
	// without a fork and an exec per check.
	Checkers Checkers

	// checking has the host paths being checked: a check stuck on hung
	// storage outlives the operation that started it (mount.Bounded gives
	// up on it), and without this every retry of the volume would leave
	// one more process stuck on the same path; with it, retries wait.
	checking inflight.Set
}

var (
	_ volume.Plugin    = (*Plugin)(nil)
	_ volume.Validator = (*Plugin)(nil)
)

// Name implements volume.Plugin.
func (p *Plugin) Name() string { return Name }

// CanSupport implements volume.Plugin.
func (p *Plugin) CanSupport(v *v1.Volume) bool { return v.HostPath != nil }

// Validate rejects relative paths, paths with a ".." element and unknown types.
func (p *Plugin) Validate(spec *volume.Spec) error {
	hp := spec.Volume.HostPath
	if !filepath.IsAbs(hp.Path) {
		return fmt.Errorf("hostPath.path %q must be absolute", hp.Path)
	}
	for _, elem := range strings.Split(hp.Path, "/") {
		if elem == ".." {
			return fmt.Errorf("hostPath.path %q must not contain '..'", hp.Path)
		}
	}
	if _, ok := checks[hostPathType(hp)]; !ok {
		return fmt.Errorf("hostPath.type %q is not a known type", hostPathType(hp))
	}
	return nil
}

// SetUp checks the host path against the volume's type, resolving it inside
// the host root (see internal/hostroot).
func (p *Plugin) SetUp(ctx context.Context, spec *volume.Spec, _ string) (volume.Result, error) {
	hp := spec.Volume.HostPath
	check, ok := checks[hostPathType(hp)]
	if !ok {
		return volume.Result{}, fmt.Errorf("hostPath.type %q is not a known type", hostPathType(hp))
	}
	host := path.Clean("/" + hp.Path)
	if err := p.check(ctx, check, hostPathType(hp), host); err != nil {
		return volume.Result{}, fmt.Errorf("hostPath %s (type %s): %w", hp.Path, hostPathType(hp), err)
	}
	return volume.Result{Path: hp.Path}, nil
}

// check checks the host path host, in a checker process when the plugin
// has them, with at most one check of a path at a time, and gives up when
// ctx ends. A check given up on stays in progress until its checker
// process has really gone.
func (p *Plugin) check(ctx context.Context, check check, typ v1.HostPathType, host string) error {
	wait, cancel := context.WithTimeout(ctx, earlierWait)
	end, err := p.checking.Begin(wait, host)
	cancel()
	if err != nil {
		return fmt.Errorf("an earlier check of %s has not returned (is its storage hung?): %w", host, err)
	}
	if p.Checkers != nil {
		return p.askChecker(ctx, typ, host, end)
	}
	if err := ctx.Err(); err != nil { // no goroutine once ctx has ended
		end()
		return fmt.Errorf("gave up waiting for storage: %w", err)
	}
	_, err = mount.Bounded(ctx, func() (struct{}, error) {
		defer end()
		if len(p.Checker) > 0 {
			return struct{}{}, p.runChecker(ctx, typ, host)
		}
		return struct{}{}, checkIn(p.HostRoot, check, host)
	})
	return err
}

// earlierWait is how long a check waits for an earlier check of the same
// path: the checker's own deadline. One still running past it is stuck
// (its checker abandoned, not gone yet), and the volume fails at once,
// holding no operation of the agent for longer.
const earlierWait = procpool.DefaultRequestTimeout

// TearDown does nothing: data on the host is never touched.
func (p *Plugin) TearDown(context.Context, string) error { return nil }

func hostPathType(hp *v1.HostPathVolumeSource) v1.HostPathType {
	if hp.Type == nil {
		return v1.HostPathUnset
	}
	return *hp.Type
}

// check checks (or creates) the clean absolute host path p in r.
type check func(r hostroot.Root, p string) error

// checks maps each type to its check, following the kubelet.
var checks = map[v1.HostPathType]check{
	v1.HostPathUnset:             func(hostroot.Root, string) error { return nil },
	v1.HostPathDirectoryOrCreate: directoryOrCreate,
	v1.HostPathDirectory:         isType(unix.S_IFDIR, "a directory"),
	v1.HostPathFileOrCreate:      fileOrCreate,
	v1.HostPathFile:              isType(unix.S_IFREG, "a file"),
	v1.HostPathSocket:            isType(unix.S_IFSOCK, "a socket"),
	v1.HostPathCharDev:           isType(unix.S_IFCHR, "a character device"),
	v1.HostPathBlockDev:          isType(unix.S_IFBLK, "a block device"),
}

// isType checks that p exists and has the file type want (unix.S_IFMT bits).
func isType(want uint32, what string) check {
	return func(r hostroot.Root, p string) error {
		typ, err := r.FileType(p)
		if err != nil {
			return err
		}
		if typ != want {
			return fmt.Errorf("%s is not %s", p, what)
		}
		return nil
	}
}

// directoryOrCreate creates a missing directory with mode 0755 (and its
// parents), else checks that p is a directory.
func directoryOrCreate(r hostroot.Root, p string) error {
	err := isType(unix.S_IFDIR, "a directory")(r, p)
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return r.MkdirAll(p)
}

// fileOrCreate creates a missing file with mode 0644 (its parent must
// exist), else checks that p is a file.
func fileOrCreate(r hostroot.Root, p string) error {
	created, err := r.CreateFile(p)
	if err != nil || created {
		return err
	}
	return isType(unix.S_IFREG, "a file")(r, p)
}
