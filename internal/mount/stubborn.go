package mount

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// plainUnmountWait bounds a plain unmount of a network mount before it is
// forced: a dead server can make it wait forever.
const plainUnmountWait = 10 * time.Second

// UnmountStubborn unmounts a network mount whose server may be dead: a
// plain umount2(2) first, then a forced one (MNT_FORCE aborts the requests
// in flight), then a lazy one (MNT_DETACH takes the mount out of the tree
// at once, the kernel lets go of it when its last user does). It returns
// how it got the mount off dir: "unmounted", "forced" or "detached". The
// system call is used directly: umount(8) would run the file system's
// helper, which may ask the dead server first.
func UnmountStubborn(ctx context.Context, dir string) (string, error) {
	plain, cancel := context.WithTimeout(ctx, plainUnmountWait)
	defer cancel()
	var errs []error
	for _, step := range []struct {
		how   string
		flags int
		ctx   context.Context
	}{{"unmounted", 0, plain}, {"forced", unix.MNT_FORCE, ctx}, {"detached", unix.MNT_DETACH, ctx}} {
		_, err := Bounded(step.ctx, func() (struct{}, error) { return struct{}{}, unix.Unmount(dir, step.flags) })
		if err == nil {
			return step.how, nil
		}
		if mounted, tableErr := MountedByTable(ctx, dir); tableErr == nil && !mounted {
			return step.how, nil // an earlier call, given up on, took it off
		}
		errs = append(errs, fmt.Errorf("%s: %w", step.how, err))
	}
	return "", fmt.Errorf("unmount %s: %w", dir, OneLine(errors.Join(errs...)))
}
