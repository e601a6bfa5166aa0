package nfstest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
)

// MountNFSPath is where util-linux's mount(8) looks for the NFS helper.
const MountNFSPath = "/sbin/mount.nfs"

// Environment the helper reads; see test/nfs/mountnfs.
const (
	logDirEnv   = "NFSTEST_HELPER_LOGS"
	lifelineEnv = "NFSTEST_LIFELINE_PID"
)

// BuildMountHelper builds the mount.nfs helper (test/nfs/mountnfs) into
// dir and returns its path. Call it once per test binary, from TestMain,
// with a directory TestMain removes; the go tool must be on $PATH.
func BuildMountHelper(dir string) (string, error) {
	path := filepath.Join(dir, "mount.nfs")
	build := exec.Command("go", "build", "-o", path, "github.com/volume-agent/volume-agent/test/nfs/mountnfs")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the mount.nfs helper: %w\n%s", err, out)
	}
	return path, nil
}

// Namespace is a private mount namespace in which /sbin/mount.nfs is the
// helper, so that `mount -t nfs` run inside mounts through it. The host
// is never changed: mounts made inside are invisible outside and vanish
// with the namespace. A process (the holder) keeps the namespace alive
// until the test ends.
//
// From outside, the test reaches the namespace's files through Path and
// its mount table through Mounts. Inside, Command runs programs.
type Namespace struct {
	t      testing.TB
	holder *exec.Cmd
	stdin  io.Closer // closing it ends the holder
	exited chan struct{}
	mntNS  string // the namespace's identity: readlink /proc/PID/ns/mnt
	logDir string // where the helper's FUSE servers log
}

// NewNamespace creates a private mount namespace with helper (from
// BuildMountHelper) over /sbin/mount.nfs. It skips the test without root
// or without /sbin/mount.nfs to cover: a bind mount needs an existing
// file, and Debian's nfs-common provides one (make test installs it, see test/deps.sh).
//
// When the test ends, the namespace's holder exits; the helper's FUSE
// servers detach their mounts and exit when it does, and every process
// left in the namespace is killed, so that none, and no mount, outlives
// the test. On failure the helper's logs are printed.
func NewNamespace(t testing.TB, helper string) *Namespace {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("NFS tests need root: they create mount namespaces and mount")
	}
	if _, err := os.Stat(MountNFSPath); err != nil {
		t.Skipf("NFS tests need a file at %s to bind the test helper over (apt-get install nfs-common): %v", MountNFSPath, err)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("NFS tests mount through FUSE: %v", err)
	}
	ns := &Namespace{t: t, logDir: t.TempDir(), exited: make(chan struct{})}
	ns.startHolder(helper)
	t.Cleanup(ns.close)
	return ns
}

// holderScript runs in the new namespace: it puts the helper ($1) over
// mount.nfs, reports, and waits until its stdin closes (the test ended,
// or the test process died).
const holderScript = `mount --bind "$1" ` + MountNFSPath + ` && echo ready && read -r _`

func (ns *Namespace) startHolder(helper string) {
	t := ns.t
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", holderScript, "sh", helper)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("nfstest: start the namespace holder: %v", err)
	}
	ns.holder, ns.stdin = cmd, stdin
	go func() { _ = cmd.Wait(); close(ns.exited) }()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "ready\n" {
		ns.close()
		t.Fatalf("nfstest: the namespace holder did not set up %s (said %q)", MountNFSPath, line)
	}
	ns.mntNS, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid))
	if err != nil {
		ns.close()
		t.Fatalf("nfstest: namespace of the holder: %v", err)
	}
}

// Pid is a process inside the namespace, alive until the test ends.
func (ns *Namespace) Pid() int { return ns.holder.Process.Pid }

// Command returns a command that runs name with args inside the
// namespace (through nsenter, which needs root). Its working directory
// is the namespace's root, so paths should be absolute. The command dies
// with the test process (Pdeathsig: change cmd.SysProcAttr's fields
// rather than replacing it), and its environment makes mounts the helper
// serves end with the namespace.
func (ns *Namespace) Command(name string, args ...string) *exec.Cmd {
	pid := strconv.Itoa(ns.Pid())
	cmd := exec.Command("nsenter", append([]string{"--target", pid, "--mount", "--", name}, args...)...)
	cmd.Env = append(os.Environ(), logDirEnv+"="+ns.logDir, lifelineEnv+"="+pid)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Run runs name with args inside the namespace and returns its combined
// output and its error (an *exec.ExitError when it exited non-zero).
func (ns *Namespace) Run(name string, args ...string) (string, error) {
	out, err := ns.Command(name, args...).CombinedOutput()
	return string(out), err
}

// Path returns where the test process finds path of the namespace:
// /proc/PID/root/path, which resolves through the namespace's mounts.
func (ns *Namespace) Path(path string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", ns.Pid()), path)
}

// Mounts returns the namespace's mount table (/proc/PID/mountinfo).
func (ns *Namespace) Mounts() ([]*mountinfo.Info, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", ns.Pid()))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return mountinfo.GetMountsFromReader(f, nil)
}

// Mount returns the namespace's mount on mountPoint, if any (the last
// one, which is the one visible there).
func (ns *Namespace) Mount(mountPoint string) (*mountinfo.Info, bool) {
	ns.t.Helper()
	mounts, err := ns.Mounts()
	if err != nil {
		ns.t.Fatalf("nfstest: mount table of the namespace: %v", err)
	}
	var found *mountinfo.Info
	for _, m := range mounts {
		if m.Mountpoint == mountPoint {
			found = m
		}
	}
	return found, found != nil
}

// Processes returns the processes inside the namespace other than its
// holder, such as the helper's FUSE servers.
func (ns *Namespace) Processes() []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == ns.Pid() {
			continue
		}
		if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); link == ns.mntNS {
			pids = append(pids, pid)
		}
	}
	return pids
}

// HelperLogs returns what the helper's FUSE servers logged.
func (ns *Namespace) HelperLogs() string {
	var b strings.Builder
	logs, _ := filepath.Glob(filepath.Join(ns.logDir, "*.log"))
	for _, l := range logs {
		content, _ := os.ReadFile(l)
		fmt.Fprintf(&b, "--- %s\n%s", filepath.Base(l), content)
	}
	return b.String()
}

// close ends the namespace: the holder exits, the FUSE servers see it and
// exit, and whatever is left inside is killed.
func (ns *Namespace) close() {
	if ns.t.Failed() {
		ns.t.Logf("mount.nfs helper logs:\n%s", ns.HelperLogs())
	}
	ns.stdin.Close()
	select {
	case <-ns.exited:
	case <-time.After(5 * time.Second):
		_ = ns.holder.Process.Kill()
		<-ns.exited
	}
	if ns.mntNS == "" {
		return
	}
	if ns.waitEmpty(5 * time.Second) {
		return
	}
	left := ns.Processes()
	for _, pid := range left {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if !ns.waitEmpty(5 * time.Second) {
		ns.t.Errorf("nfstest: processes %v still in the namespace after SIGKILL", ns.Processes())
	} else {
		ns.t.Errorf("nfstest: processes %v were left in the namespace; killed them", left)
	}
}

// waitEmpty waits until no process is left in the namespace.
func (ns *Namespace) waitEmpty(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for len(ns.Processes()) > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
