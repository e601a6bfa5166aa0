package mount

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// mountByCall makes a tmpfs or bind mount with mount(2). A bind mount with
// per-mount flags (ro, nosuid…) takes a second call: the first bind ignores
// every flag but MS_BIND, and a bind remount applies them. Should the
// remount fail, the bind is taken off again, so that a mount asked to be
// read-only is never left writable.
func mountByCall(m Mount, target string) error {
	s, err := parseOptions(m)
	if err != nil {
		return err
	}
	if !s.bind() {
		return unix.Mount(m.Source, target, m.Type, s.flags, s.data)
	}
	if err := unix.Mount(m.Source, target, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	if s.flags&perMountFlags == 0 {
		return nil
	}
	if err := remount(target, s.flags&perMountFlags); err != nil {
		if undo := unmountNew(target); undo != nil {
			return fmt.Errorf("apply %q to the bind mount: %w; taking the bind mount off again failed, it is left in place: %w", m.Options, err, undo)
		}
		return fmt.Errorf("apply %q to the bind mount (taken off again): %w", m.Options, err)
	}
	return nil
}

// remount is remountBind; tests replace it to make it fail.
var remount = remountBind

// remountBind applies flags to the bind mount on target. It keeps the
// restrictions the mount has from its source (a bind of a nosuid mount is
// nosuid): the kernel sets a remounted bind's flags to exactly those given,
// and refuses to clear one that is locked. Without an atime flag, the
// kernel keeps the mount's atime choice.
func remountBind(target string, flags uintptr) error {
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		return fmt.Errorf("read the flags of the new mount: %w", err)
	}
	const kept = unix.ST_RDONLY | unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC | unix.MS_NOSYMFOLLOW
	flags |= uintptr(st.Flags) & kept //nolint:gosec // G115: statfs flags are a bit set; the ST_ values are the MS_ values (ST_NOSYMFOLLOW too)
	return unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|flags, "")
}

// unmountNew takes off a mount this process has just made, which nothing
// can be using yet; should it be busy all the same, it is detached.
func unmountNew(target string) error {
	err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
	if err == nil || errors.Is(err, unix.EINVAL) {
		return nil // EINVAL: no mount there any more
	}
	return unix.Unmount(target, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
}
