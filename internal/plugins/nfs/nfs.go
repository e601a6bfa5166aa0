// Package nfs implements NFS volumes: an inline nfs: volume of a pod, or an
// NFS PersistentVolume a claim binds the pod to. Each is mounted with
// `mount -t nfs server:/path dir` through k8s.io/mount-utils (mount(8) runs
// mount.nfs), with the PV's mount options.
//
// An NFS server can stop answering at any time, and a call on its mount
// then waits as long as the server is gone. So every mount, unmount and
// stat runs under a deadline, off the caller's path; whether a directory is
// a mount point is read from the kernel's mount table, which never asks the
// server; a dead mount (ESTALE, ENOTCONN, EIO, or a stat that does not
// return) is recognised, remounted when the server answers again with new
// handles, and taken down with a forced, then a lazy unmount.
//
// Teardown unmounts and removes the empty mount point: nothing else, ever.
// The data lives on the server.
package nfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	mountutils "k8s.io/mount-utils"

	"github.com/volume-agent/volume-agent/internal/inflight"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Name is the plugin's kubelet name.
const Name = "kubernetes.io/nfs"

// statWait bounds the stat that tells a live mount from a dead one.
const statWait = 5 * time.Second

// Tool mounts through mount(8): k8s.io/mount-utils' Interface does.
type Tool interface {
	Mount(source, target, fsType string, options []string) error
}

// Plugin sets up NFS volumes.
type Plugin struct {
	// Tool mounts; mountutils.NewWithoutSystemd("") in the agent.
	Tool Tool
	// Logger says how a dead mount was taken down; may be nil.
	Logger *zap.Logger

	// inFlight has the directories with a mount or unmount running: a
	// mount(8) given up on at its deadline may still finish, and the next
	// call on the directory waits for it.
	inFlight inflight.Set
	stats    singleflight.Group // one stat in flight per directory
}

var (
	_ volume.Plugin    = (*Plugin)(nil)
	_ volume.PVPlugin  = (*Plugin)(nil)
	_ volume.Validator = (*Plugin)(nil)
	_ volume.Checker   = (*Plugin)(nil)
)

// New returns the plugin mounting through mount-utils.
func New(log *zap.Logger) *Plugin {
	return &Plugin{Tool: mountutils.NewWithoutSystemd(""), Logger: log}
}

// Name implements volume.Plugin.
func (p *Plugin) Name() string { return Name }

// CanSupport implements volume.Plugin: an inline nfs: volume.
func (p *Plugin) CanSupport(v *v1.Volume) bool { return v.NFS != nil }

// CanSupportPV implements volume.PVPlugin.
func (p *Plugin) CanSupportPV(pv *v1.PersistentVolume) bool { return pv.Spec.NFS != nil }

// export is what to mount: server:path.
type export struct{ server, path string }

func (e export) String() string {
	server := e.server
	if strings.Contains(server, ":") && !strings.HasPrefix(server, "[") {
		server = "[" + server + "]" // an IPv6 address
	}
	return server + ":" + e.path
}

func exportOf(spec *volume.Spec) (export, string) {
	if spec.PV != nil {
		return export{spec.PV.Spec.NFS.Server, spec.PV.Spec.NFS.Path}, "PersistentVolume " + spec.PV.Name + ": spec.nfs"
	}
	return export{spec.Volume.NFS.Server, spec.Volume.NFS.Path}, "nfs"
}

// Validate refuses, before anything runs, a server, path or mount option
// that mount(8) could read as something else: an option injected through
// a leading "-", a comma or whitespace.
func (p *Plugin) Validate(spec *volume.Spec) error {
	e, field := exportOf(spec)
	switch {
	case e.server == "":
		return fmt.Errorf("%s.server is required", field)
	case strings.HasPrefix(e.server, "-") || strings.ContainsAny(e.server, " \t\n\r,\x00"):
		return fmt.Errorf("%s.server %q may not start with '-' or hold whitespace or a comma", field, e.server)
	case !bracketsWhole(e.server):
		return fmt.Errorf("%s.server %q may hold '[' and ']' only around the whole address, as in [fd00::1]", field, e.server)
	case !path.IsAbs(e.path):
		return fmt.Errorf("%s.path %q must be an absolute export path", field, e.path)
	case strings.ContainsAny(e.path, " \t\n\r,\x00"):
		return fmt.Errorf("%s.path %q may not hold whitespace or a comma", field, e.path)
	}
	for _, o := range volume.MountOptions(spec.PV) {
		if o == "" || strings.HasPrefix(o, "-") || strings.ContainsAny(o, " \t\n\r,\x00") {
			return fmt.Errorf("PersistentVolume %s: mount option %q may not be empty, start with '-' or hold whitespace or a comma", spec.PV.Name, o)
		}
	}
	return nil
}

// bracketsWhole reports whether server holds no '[' or ']' but, perhaps,
// one pair around all of it. mount.nfs and the kernel read "[...]" up to
// the first ']' as the server and what follows its ':' as the path, so a
// server "[a]:/x" would move "/x" into the path mounted.
func bracketsWhole(server string) bool {
	if inner, ok := strings.CutPrefix(server, "["); ok {
		if inner, ok = strings.CutSuffix(inner, "]"); ok {
			server = inner
		}
	}
	return !strings.ContainsAny(server, "[]")
}

// SetUp mounts the export on dir. On a directory that is mounted already it
// checks the mount: a live one is kept, a dead one whose server answers
// again (ESTALE after the server lost its handles) is mounted again, and
// one whose server does not answer is an error, retried with backoff.
func (p *Plugin) SetUp(ctx context.Context, spec *volume.Spec, dir string) (volume.Result, error) {
	done, err := p.begin(ctx, dir)
	if err != nil {
		return volume.Result{}, err
	}
	handedOver := false
	defer func() {
		if !handedOver {
			done()
		}
	}()
	created, err := mount.MakeDir(dir, 0o750)
	if err != nil {
		return volume.Result{}, err
	}
	mounted, err := mount.MountedByTable(ctx, dir)
	if err != nil {
		return volume.Result{}, err
	}
	if mounted {
		err := p.Check(ctx, dir)
		if err == nil || !errors.Is(err, errStale) {
			return volume.Result{Path: dir}, err
		}
		if err := p.takeDown(ctx, dir, "remount a stale mount"); err != nil {
			return volume.Result{}, err
		}
	}
	handedOver = true
	if err := p.mount(ctx, spec, dir, done); err != nil {
		if created && !errors.Is(err, context.DeadlineExceeded) {
			_ = os.Remove(dir) // nothing was mounted: the empty directory this call made
		}
		return volume.Result{}, err
	}
	return volume.Result{Path: dir}, nil
}

// mount runs mount(8) under ctx's deadline, and calls done when mount(8)
// returns. When the deadline passes first the mount may still happen: the
// volume is then Uncertain, and the next call on dir waits for this one
// (see begin) before it looks.
func (p *Plugin) mount(ctx context.Context, spec *volume.Spec, dir string, done func()) error {
	e, _ := exportOf(spec)
	opts := volume.MountOptions(spec.PV)
	if spec.ReadOnly() {
		opts = append(opts, "ro")
	}
	result := make(chan error, 1)
	go func() {
		defer done()
		result <- p.Tool.Mount(e.String(), dir, "nfs", opts)
	}()
	select {
	case err := <-result:
		if err != nil {
			// mount-utils reports mount(8)'s command and output on
			// lines of their own: one line, for logs and the status.
			return fmt.Errorf("mount %s on %s: %w", e, dir, mount.OneLine(err))
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("mount %s on %s: gave up waiting for mount(8): %w", e, dir, ctx.Err())
	}
}

// errStale marks a mount whose server answers, but not for it any more.
var errStale = errors.New("stale NFS mount")

// Check implements volume.Checker: it tells a live mount from a dead one
// with a stat under a short deadline. A stat on a hard mount of a dead
// server waits until the server answers; the next check of the same mount
// waits for that one rather than start another, so a long outage holds one
// thread per mount, not one per check.
func (p *Plugin) Check(ctx context.Context, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, statWait)
	defer cancel()
	_, err := mount.Bounded(ctx, func() (os.FileInfo, error) { return p.stat(dir) })
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("NFS server does not answer: a stat of %s did not return within %v: %w", dir, statWait, err)
	case mountutils.IsCorruptedMnt(errors.Unwrap(err)) || mountutils.IsCorruptedMnt(err):
		return fmt.Errorf("dead NFS mount on %s: %w: %w", dir, errStale, err)
	}
	return fmt.Errorf("check NFS mount %s: %w", dir, err)
}

// stat stats dir, or waits for the stat of dir already running.
func (p *Plugin) stat(dir string) (os.FileInfo, error) {
	info, err, _ := p.stats.Do(dir, func() (any, error) { return os.Stat(dir) })
	if err != nil {
		return nil, err
	}
	return info.(os.FileInfo), nil
}

// TearDown unmounts dir — forced, then lazily, when the server is dead —
// and removes the empty mount point. Nothing else is ever removed.
func (p *Plugin) TearDown(ctx context.Context, dir string) error {
	done, err := p.begin(ctx, dir)
	if err != nil {
		return err
	}
	defer done()
	mounted, err := mount.MountedByTable(ctx, dir)
	if err != nil {
		return err
	}
	if mounted {
		if err := p.takeDown(ctx, dir, "teardown"); err != nil {
			return err
		}
	}
	return mount.RemoveEmptyDir(dir)
}

// takeDown unmounts dir. A live mount is unmounted plainly, and one that is
// busy (open files, a mount nested inside) stays, with an error. A dead
// one is unmounted however it takes — forced, then lazily — and the log
// says how.
func (p *Plugin) takeDown(ctx context.Context, dir, why string) error {
	if err := p.Check(ctx, dir); err == nil {
		_, err := mount.Bounded(ctx, func() (struct{}, error) { return struct{}{}, unix.Unmount(dir, 0) })
		if err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
		return nil
	}
	how, err := mount.UnmountStubborn(ctx, dir)
	if err != nil {
		return err
	}
	if how != "unmounted" && p.Logger != nil {
		p.Logger.Info("NFS mount taken down by force", zap.String("dir", dir), zap.String("how", how), zap.String("why", why))
	}
	return nil
}

// begin waits until no earlier mount or unmount of dir is running, and
// returns the end of this one.
func (p *Plugin) begin(ctx context.Context, dir string) (func(), error) {
	done, err := p.inFlight.Begin(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("an earlier mount or unmount of %s has not returned (is the NFS server answering?): %w", dir, err)
	}
	return done, nil
}
