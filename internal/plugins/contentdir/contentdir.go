// Package contentdir sets up the directories of volumes whose content the
// agent writes itself — configMap, secret, downwardAPI and projected: it
// creates the volume directory, mounts a tmpfs on it when the content must
// never reach disk, and writes the payload with the atomic writer.
//
// It never writes outside the volume directory (the atomic writer works
// through an os.Root) and on failure undoes only what the same call did.
package contentdir

import (
	"context"
	"fmt"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/atomicwriter"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// freshWrites counts the set-ups that wrote with WriteNew, for tests.
var freshWrites atomic.Int64

// Payload is the content of a volume: relative path → file.
type Payload = map[string]atomicwriter.File

// Dir sets up content volume directories.
type Dir struct {
	Mounter mount.Mounter
	// Memory puts the volume on a tmpfs (secrets, tokens).
	Memory bool
	// NoSwap mounts the tmpfs with noswap, so that its pages never reach
	// swap; only where the kernel supports it (see mount.ProbeNoSwap).
	NoSwap bool
}

// SetUp makes dir hold exactly payload. It reports whether the tmpfs it
// mounted may reach swap: SwapUnknown when it mounted none (on disk, or
// mounted before).
func (d Dir) SetUp(ctx context.Context, dir string, payload Payload) (_ volume.Swap, retErr error) {
	created, err := mount.MakeDir(dir, 0o755)
	if err != nil {
		return volume.SwapUnknown, err
	}
	mounted := false
	defer func() {
		if retErr == nil {
			return
		}
		undo, cancel := mount.RollbackContext(ctx)
		defer cancel()
		if mounted {
			_ = d.Mounter.Unmount(undo, dir)
		}
		if created {
			_ = mount.RemoveDir(undo, d.Mounter, dir)
		}
	}()
	if d.Memory {
		m := mount.Tmpfs(d.NoSwap, "mode=0755")
		if mounted, err = mount.MountOn(ctx, d.Mounter, m, dir, created); err != nil {
			return volume.SwapUnknown, err
		}
	}
	if err := write(dir, payload, created && (!d.Memory || mounted)); err != nil {
		return volume.SwapUnknown, fmt.Errorf("write content: %w", err)
	}
	if !mounted || !mount.Privileged(d.Mounter) {
		return volume.SwapUnknown, nil
	}
	return volume.SwapOf(d.NoSwap), nil
}

// write writes payload into dir: fresh when this set-up made dir (and
// mounted its tmpfs), so nothing can be in it yet, otherwise with the full
// writer, which compares, repairs and cleans up what an earlier write left.
func write(dir string, payload Payload, fresh bool) error {
	var err error
	if fresh {
		freshWrites.Add(1)
		_, err = atomicwriter.New(dir).WriteNew(payload)
	} else {
		_, err = atomicwriter.New(dir).Write(payload)
	}
	return err
}

// TearDown unmounts the tmpfs, if any, and removes the directory.
func (d Dir) TearDown(ctx context.Context, dir string) error {
	return mount.RemoveDir(ctx, d.Mounter, dir)
}

// ApplyFsGroup gives the pod's fsGroup ownership of every file and lets the
// group read it, as the kubelet does for content volumes (a 0400 file
// becomes 0440).
func ApplyFsGroup(pod *v1.Pod, payload Payload) {
	if pod == nil || pod.Spec.SecurityContext == nil || pod.Spec.SecurityContext.FSGroup == nil {
		return
	}
	gid := *pod.Spec.SecurityContext.FSGroup
	for path, f := range payload {
		f.GID = &gid
		f.Mode |= 0o440
		payload[path] = f
	}
}
