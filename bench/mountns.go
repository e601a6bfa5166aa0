package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// childFlag makes this program the mount-namespace child: it enters a
// private mount namespace, bind-mounts a directory N times there, and then
// executes the agent, which inherits the namespace and its N unrelated
// mounts. The host's mount table is never changed, and the mounts vanish
// with the agent.
const childFlag = "-mount-namespace-child"

// runChild is `bench -mount-namespace-child N DIR AGENT ARGS...`; it
// returns only on failure. The mount points are made in DIR.
func runChild(args []string) error {
	if len(args) < 3 {
		return fmt.Errorf("usage: %s N DIR AGENT [ARGS...]", childFlag)
	}
	n, err := strconv.Atoi(args[0])
	if err != nil {
		return fmt.Errorf("%s %q: %w", childFlag, args[0], err)
	}
	// The namespace belongs to this thread; exec runs from it.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private in the new namespace: %w", err)
	}
	if err := bindMany(args[1], n); err != nil {
		return err
	}
	return syscall.Exec(args[2], args[2:], os.Environ())
}

// bindMany bind-mounts one directory on n others below dir, in the
// current namespace. The directories are on the host's disk but their
// mounts are not.
func bindMany(dir string, n int) error {
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return err
	}
	for i := range n {
		target := filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(target, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount %d of %d: %w", i+1, n, err)
		}
	}
	return nil
}
