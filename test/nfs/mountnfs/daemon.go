package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/test/nfs/nfs3"
)

const (
	// readyFDEnv marks the re-executed helper, the FUSE server, and
	// names the descriptor on which it reports whether its mount is in
	// place, as fusermount's _FUSE_COMMFD does.
	readyFDEnv = "_NFSTEST_MOUNT_READY_FD"
	// LogDirEnv names the directory the FUSE servers log to; without it
	// they log nowhere.
	logDirEnv = "NFSTEST_HELPER_LOGS"
	// lifelineEnv names a process whose end ends every FUSE server
	// started under it, so that a test that dies leaves none behind.
	lifelineEnv = "NFSTEST_LIFELINE_PID"
	// readyOK is the report of a mount in place; anything else is why
	// it failed.
	readyOK = "ok"
)

// startServer runs the helper again with args, detached, as the FUSE
// server, and returns once it reports its mount in place or fails.
func startServer(args []string) error {
	logFile, logPath, err := openLog()
	if err != nil {
		return err
	}
	defer logFile.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	self, err := os.Executable() // named mount.nfs in ps, unlike /proc/self/exe
	if err != nil {
		self = "/proc/self/exe"
	}
	cmd := exec.Command(self, args[1:]...)
	cmd.Args[0] = args[0]
	cmd.Env = append(os.Environ(), readyFDEnv+"=3")
	cmd.ExtraFiles = []*os.File{w}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = "/" // hold no directory busy
	// Until it reports, the server dies with this process: a mount(8)
	// killed at its deadline leaves nothing to be mounted later.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return fmt.Errorf("start the FUSE server: %w", err)
	}
	// The server closes its end once it has reported, or by dying.
	report, _ := io.ReadAll(r)
	_ = cmd.Process.Release()
	switch msg := strings.TrimSpace(string(report)); msg {
	case readyOK:
		return nil
	case "":
		return fmt.Errorf("the FUSE server exited before mounting (log: %s)", logPath)
	default:
		return errors.New(msg)
	}
}

func openLog() (*os.File, string, error) {
	dir := os.Getenv(logDirEnv)
	if dir == "" {
		f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		return f, os.DevNull, err
	}
	path := filepath.Join(dir, fmt.Sprintf("mount.nfs-%d.log", os.Getpid()))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	return f, path, err
}

// serve is the FUSE server: it mounts, reports on the ready descriptor,
// and serves until the file system is unmounted or it is told to stop.
func serve() int {
	logger := log.New(os.Stderr, fmt.Sprintf("mount.nfs[%d] ", os.Getpid()), log.LstdFlags|log.Lmicroseconds)
	ready := os.NewFile(3, "ready")
	inv, _, err := parseArgs(os.Args)
	if err == nil && inv == nil {
		err = errors.New("nothing to mount")
	}
	var lifeline <-chan struct{}
	if err == nil {
		lifeline, err = watchLifeline()
	}
	var srv *fuse.Server
	if err == nil {
		srv, err = mountExport(inv)
	}
	if err != nil {
		logger.Printf("mount failed: %v", err)
		fmt.Fprintln(ready, err)
		return exitFail
	}
	closeFuseOnExec()
	// From now on the mount outlives mount.nfs. (This runs on the main
	// thread, which carries the setting: see init.)
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, 0, 0, 0, 0); err != nil {
		logger.Printf("keep serving after mount.nfs exits: %v", err)
	}
	logger.Printf("mounted %s on %s (%+v)", inv.spec, inv.dir, inv.cfg)
	fmt.Fprintln(ready, readyOK)
	ready.Close()
	stop(logger, srv, inv.dir, lifeline)
	return 0
}

// mountExport asks the server for the export's root handle and mounts it
// on the mount point.
func mountExport(inv *invocation) (*fuse.Server, error) {
	cfg := inv.cfg
	ctx, cancel := context.WithTimeout(context.Background(), cfg.mountTimeout())
	defer cancel()
	mounter := nfs3.NewClient(net.JoinHostPort(inv.server, strconv.Itoa(cfg.mountPort)), cfg.timeo)
	root, err := mounter.Mount(ctx, inv.path)
	mounter.Close()
	if err != nil {
		return nil, fmt.Errorf("MOUNT %s on %s port %d: %w", inv.path, inv.server, cfg.mountPort, err)
	}
	client := nfs3.NewClient(net.JoinHostPort(inv.server, strconv.Itoa(cfg.port)), cfg.timeo)
	attr, err := client.GetAttr(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("NFS on %s port %d: %w", inv.server, cfg.port, err)
	}
	info, err := client.FSInfo(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("NFS on %s port %d: %w", inv.server, cfg.port, err)
	}
	fsys := &nfsFS{client: client, cfg: cfg, chunk: transferSize(cfg.rsize, int(info.RTMax), int(info.WTMax)),
		handles: map[uint64][]byte{attr.Fileid: root}}
	cacheTime := cfg.cacheTime
	flags := uintptr(syscall.MS_NOSUID | syscall.MS_NODEV) // go-fuse's default, always
	if cfg.readOnly {
		flags |= syscall.MS_RDONLY
	}
	if cfg.noexec {
		flags |= syscall.MS_NOEXEC
	}
	return fs.Mount(inv.dir, &node{fsys: fsys}, &fs.Options{
		MountOptions: fuse.MountOptions{
			// No fusermount here: mount(2) directly, as root.
			DirectMountStrict: true,
			DirectMountFlags:  flags,
			Name:              "nfs-test", // file system type fuse.nfs-test
			FsName:            inv.spec,   // the mount's source, as for NFS
			AllowOther:        true,
			Options:           []string{"default_permissions"},
			DisableXAttrs:     true,
			// Readdir lists names and types; the kernel looks up
			// the ones it needs.
			DisableReadDirPlus: true,
		},
		EntryTimeout:    &cacheTime,
		AttrTimeout:     &cacheTime,
		NegativeTimeout: &cacheTime,
		RootStableAttr:  &fs.StableAttr{Ino: attr.Fileid},
	})
}

// transferSize is the largest READ or WRITE payload: rsize/wsize, within
// what the server takes.
func transferSize(want int, serverMax ...int) int {
	for _, m := range serverMax {
		if m > 0 {
			want = min(want, m)
		}
	}
	return want
}

// stop waits until the file system is unmounted, or until a signal or the
// lifeline's end; then it detaches the mount and gives the server a
// moment to finish. Requests still waiting when the process exits fail:
// closing /dev/fuse aborts the connection.
func stop(logger *log.Logger, srv *fuse.Server, dir string, lifeline <-chan struct{}) {
	served := make(chan struct{})
	go func() { srv.Wait(); close(served) }()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	select {
	case <-served:
		logger.Printf("unmounted")
		return
	case sig := <-signals:
		logger.Printf("got %v: detaching %s", sig, dir)
	case <-lifeline:
		logger.Printf("lifeline process ended: detaching %s", dir)
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		logger.Printf("detach %s: %v", dir, err)
	}
	select {
	case <-served:
	case <-time.After(2 * time.Second):
		logger.Printf("file system still in use 2s after it was detached; exiting anyway")
	}
}

// watchLifeline returns a channel closed when the process named by
// $NFSTEST_LIFELINE_PID exits; nil (never closed) without one. That
// process must be alive now.
func watchLifeline() (<-chan struct{}, error) {
	v := os.Getenv(lifelineEnv)
	if v == "" {
		return nil, nil
	}
	pid, err := strconv.Atoi(v)
	if err != nil {
		return nil, fmt.Errorf("$%s=%q: %w", lifelineEnv, v, err)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("lifeline process %d: %w", pid, err)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				return
			}
		}
	}()
	return ended, nil
}

// closeFuseOnExec marks this process's /dev/fuse descriptors
// close-on-exec: go-fuse's direct mount opens it without O_CLOEXEC, and a
// child holding it would keep the connection alive after this process.
func closeFuseOnExec() {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range fds {
		if link, _ := os.Readlink("/proc/self/fd/" + e.Name()); link == "/dev/fuse" {
			if fd, err := strconv.Atoi(e.Name()); err == nil {
				syscall.CloseOnExec(fd)
			}
		}
	}
}
