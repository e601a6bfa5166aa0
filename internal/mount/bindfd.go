package mount

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// BindFD bind-mounts what the descriptor src refers to (a file or a
// directory, opened by the caller without following symlinks) onto the
// entry name of the directory descriptor dir. The source is never named by
// a path that could be resolved again: the mount is cloned from the
// descriptor with open_tree(2) and attached with move_mount(2), or, on a
// kernel without them (before Linux 5.2), bound from /proc/self/fd/<src>,
// the kernel's own link to the opened file. The target is not followed if
// it is a symlink. The bind is not recursive: mounts below the source stay
// out, as with the kubelet's subPath bind mounts.
func BindFD(src, dir int, name string) error {
	tree, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if errors.Is(err, unix.ENOSYS) {
		return bindProcFD(src, dir, name)
	}
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	if err := unix.MoveMount(tree, "", dir, name, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}

// bindProcFD is BindFD through /proc/self/fd: both the source and the
// target are magic links to the opened files.
func bindProcFD(src, dir int, name string) error {
	target, err := unix.Openat2(dir, name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		return fmt.Errorf("open the target: %w", err)
	}
	defer unix.Close(target)
	proc := func(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }
	if err := unix.Mount(proc(src), proc(target), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount: %w", err)
	}
	return nil
}
