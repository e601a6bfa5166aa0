package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// lockWait is how long a start waits for another agent to let go of a
// root: long enough for the agent it replaces (a DaemonSet's rolling
// update, a restart by systemd) to exit after SIGTERM (exitDeadline).
// $VOLUME_AGENT_TEST_LOCK_WAIT (a duration), for tests only, sets it.
var lockWait = 15 * time.Second

// lockWaitEnv, for tests only, is a duration that replaces lockWait: a
// test that starts a second agent on a root need not wait 15 s each time.
const lockWaitEnv = "VOLUME_AGENT_TEST_LOCK_WAIT"

// lockWaitFromEnv applies $VOLUME_AGENT_TEST_LOCK_WAIT.
func lockWaitFromEnv() error {
	v := os.Getenv(lockWaitEnv)
	if v == "" {
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("$%s: %w", lockWaitEnv, err)
	}
	lockWait = max(d, 0)
	return nil
}

// lockDir takes an exclusive lock (flock(2)) on the directory dir itself
// for the life of the process, so that two agents never share it: an agent
// given another's --root-dir would find that agent's pods on disk, in none
// of its own sources, and tear them down; two agents sharing a
// --local-path-root would hand out, and delete, each other's volumes. The
// lock lives as long as the returned file stays open; the kernel drops it
// when the process exits, however it exits. Nothing is written: a
// read-only directory can be locked too. flag names the directory in
// errors and logs. A lock held past lockWait is refused, naming the
// process that holds it.
func lockDir(flag, dir string, log *zap.Logger) (*os.File, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0) //nolint:gosec // G304: the operator's flag, opened O_NOFOLLOW
	if err != nil {
		return nil, fmt.Errorf("%s: lock %s: %w", flag, dir, err)
	}
	deadline := time.Now().Add(lockWait)
	for logged := false; ; logged = true {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			break
		}
		if !logged {
			log.Info("waiting for another agent to let go of a directory", zap.String("flag", flag), zap.String("dir", dir),
				zap.String("holder", lockHolder(f)), zap.Duration("wait", lockWait))
		}
		time.Sleep(100 * time.Millisecond)
	}
	switch {
	case errors.Is(err, unix.EWOULDBLOCK):
		holder := lockHolder(f)
		_ = f.Close() // only read: the lock was not taken
		return nil, fmt.Errorf("%s %s is in use by %s, which holds a lock on the directory: two agents sharing it would tear down, "+
			"hand out or delete each other's volumes; stop that agent first, or give each agent its own %s", flag, dir, holder, flag)
	case err != nil:
		_ = f.Close() // only read: the lock was not taken
		return nil, fmt.Errorf("%s: lock %s: %w", flag, dir, err)
	}
	return f, nil
}

// lockHolder names the process holding a flock on the file f has open, from
// /proc/locks (which shows the PID as this process's PID namespace sees
// it), with its command name when /proc shows it.
func lockHolder(f *os.File) string {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "another process"
	}
	locks, err := os.Open("/proc/locks")
	if err != nil {
		return "another process"
	}
	defer func() { _ = locks.Close() }()
	pid := flockHolder(bufio.NewScanner(locks), unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	if pid <= 0 {
		return "another process (its PID is not visible from here)"
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return fmt.Sprintf("process %d", pid)
	}
	return fmt.Sprintf("process %d (%s)", pid, strings.TrimSpace(string(comm)))
}

// flockHolder returns the PID of the FLOCK on the file of the given device
// and inode in the lines of /proc/locks ("1: FLOCK  ADVISORY  WRITE 5441
// fe:00:10002764 0 EOF": the device as hexadecimal major:minor), or 0.
func flockHolder(lines *bufio.Scanner, major, minor uint32, ino uint64) int {
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, ino)
	for lines.Scan() {
		fields := strings.Fields(lines.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(fields[4]); err == nil {
			return pid
		}
	}
	return 0
}
