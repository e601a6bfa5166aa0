package csi

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
	"github.com/volume-agent/volume-agent/internal/provisioner/local"
)

const testNode = "node-1"

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts loop file systems")
	}
}

func sh(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// loopFS makes a file system of type fs ("btrfs" with quotas on, or
// "ext4") on a loop file of size, mounts it and returns the mount; the
// cleanup takes down every image volume, mount and loop device left.
func loopFS(t *testing.T, fs, size string) string {
	t.Helper()
	needRoot(t)
	dir := t.TempDir()
	img := filepath.Join(dir, "fs.img")
	sh(t, "truncate", "-s", size, img)
	if fs == "btrfs" {
		sh(t, "mkfs.btrfs", "-q", img)
	} else {
		sh(t, "mkfs.ext4", "-q", "-F", img)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	sh(t, "mount", "-o", "loop", img, mnt)
	t.Cleanup(func() {
		imgs, _ := filepath.Glob(filepath.Join(mnt, "*", "*"+capacity.ImageSuffix))
		for _, vi := range imgs {
			for unix.Unmount(strings.TrimSuffix(vi, capacity.ImageSuffix), 0) == nil {
			}
			detach(vi)
		}
		if err := exec.Command("umount", mnt).Run(); err != nil {
			_ = exec.Command("umount", "-l", mnt).Run()
		}
		detach(img)
	})
	if fs == "btrfs" {
		sh(t, "btrfs", "quota", "enable", mnt)
	}
	return mnt
}

func detach(img string) {
	out, _ := exec.Command("losetup", "--associated", img, "--noheadings", "--output", "NAME").Output()
	for _, dev := range strings.Fields(string(out)) {
		_ = exec.Command("losetup", "-d", dev).Run()
	}
}

// newDriver is the driver over the real local provisioner and capacity
// backend on root, with the reclaim delay given.
func newDriver(t *testing.T, root string, delay time.Duration) *Driver {
	t.Helper()
	log := zap.NewNop()
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := capacity.Open(t.Context(), capacity.Config{Root: root, Logger: log, EnableBtrfsQuota: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	p, err := local.New(local.Config{Root: root, NodeName: testNode, Mounter: mount.System{}, Logger: log, Capacity: b})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{Local: p, NodeName: testNode, Version: "test", ReclaimDelay: delay, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// agentDir holds the agent binary agentBinary built; TestMain removes it.
var agentDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if agentDir != "" {
		_ = os.RemoveAll(agentDir)
	}
	os.Exit(code)
}

// agentBinary builds cmd/volume-agent once per test run.
var agentBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "csi-sanity-agent-")
	if err != nil {
		return "", err
	}
	agentDir = dir
	bin := filepath.Join(dir, "volume-agent")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/volume-agent").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %w: %s", err, out)
	}
	return bin, nil
})

// startAgent runs the real agent in manifest mode (an empty manifest
// directory: no cluster is needed) with the local provisioner on root and
// the CSI endpoint on, until the test ends; it returns the socket.
func startAgent(t *testing.T, root string) string {
	t.Helper()
	bin, err := agentBinary()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	sock := filepath.Join(work, "plugins", Name, "csi.sock")
	for _, d := range []string{"manifests", "state"} {
		if err := os.Mkdir(filepath.Join(work, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "--manifests", filepath.Join(work, "manifests"), "--root-dir", filepath.Join(work, "state"),
		"--provisioners", "local", "--local-path-root", root, "--csi-endpoint", "unix://"+sock,
		"--kubelet-registration-dir", "", "--reclaim-delay", "0s", "--node-name", testNode, "--status-addr", "127.0.0.1:0")
	logf, err := os.Create(filepath.Join(work, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// An agent outliving a test process that exits without its cleanups
	// would hold the loop file system: it goes with the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(unix.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("agent: %v", err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("agent did not stop within 30 s of SIGTERM")
		}
		if _, err := os.Lstat(sock); !os.IsNotExist(err) {
			t.Errorf("the CSI socket outlived the agent: %v", err)
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(work, "agent.log"))
			t.Logf("agent log:\n%s", b)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if fi, err := os.Lstat(sock); err == nil {
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("CSI socket mode %v, want 0600", fi.Mode().Perm())
			}
			return sock
		}
		select {
		case err := <-exited:
			b, _ := os.ReadFile(filepath.Join(work, "agent.log"))
			t.Fatalf("agent exited: %v\n%s", err, b)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the CSI socket did not appear within 60 s")
		}
	}
}

// runSanity runs the CSI sanity suite against the real agent's socket,
// its local path root on a file system fs of its own.
func runSanity(t *testing.T, fs string) {
	mnt := loopFS(t, fs, "3G")
	sock := startAgent(t, filepath.Join(mnt, "volumes"))
	work := t.TempDir()
	cfg := sanity.NewTestConfig()
	cfg.Address = sock
	cfg.TargetPath = filepath.Join(work, "target")
	cfg.StagingPath = filepath.Join(work, "staging")
	cfg.TestVolumeSize = 64 << 20
	cfg.TestVolumeExpandSize = 128 << 20
	cfg.IdempotentCount = 2
	cfg.TestNodeVolumeAttachLimit = false
	if fs == "ext4" && !hasCapSysResource(t) {
		// The kernel grows a mounted ext4 only for CAP_SYS_RESOURCE; the
		// backend then refuses online growth, saying so (the capacity
		// package's TestImageExpandNeedsCapSysResource).
		t.Log("skipping NodeExpandVolume after publish: this process lacks CAP_SYS_RESOURCE")
		if err := flag.Set("ginkgo.skip", "NodeExpandVolume should work if node-expand is called after node-publish"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flag.Set("ginkgo.skip", "") })
	}
	sanity.Test(t, cfg)
}

// sanityFSEnv names the file system a child test process runs the
// sanity suite on: Ginkgo runs one suite per process.
const sanityFSEnv = "CSI_SANITY_FS"

// ansi matches Ginkgo's colour codes.
var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// sanityInChild runs the sanity suite on fs in a child process of this
// test binary, and fails with its output when it fails.
func sanityInChild(t *testing.T, fs string) {
	needRoot(t)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestSanityChild$", "-test.v", "-test.timeout", "20m", "-test.count", "1")
	cmd.Env = append(os.Environ(), sanityFSEnv+"="+fs)
	out, err := cmd.CombinedOutput()
	summary := ""
	for _, line := range strings.Split(ansi.ReplaceAllString(string(out), ""), "\n") {
		if strings.Contains(line, "Passed |") || strings.Contains(line, "sanity_test.go") {
			summary += line + "\n"
		}
	}
	t.Logf("sanity suite on %s:\n%s", fs, summary)
	if err != nil {
		t.Fatalf("sanity suite on %s: %v\n%s", fs, err, out)
	}
}

// TestSanityBtrfs: the CSI sanity suite against the agent on a btrfs root
// with quotas on (volumes are subvolumes with a qgroup limit).
func TestSanityBtrfs(t *testing.T) { sanityInChild(t, "btrfs") }

// TestSanityImages: the CSI sanity suite against the agent on an ext4
// root (volumes are ext4 images on loop devices; snapshots and clones
// sparse copies).
func TestSanityImages(t *testing.T) { sanityInChild(t, "ext4") }

// TestSanityChild is the child process of TestSanityBtrfs and
// TestSanityImages.
func TestSanityChild(t *testing.T) {
	fs := os.Getenv(sanityFSEnv)
	if fs == "" {
		t.Skip("run by TestSanityBtrfs and TestSanityImages, one suite per process")
	}
	runSanity(t, fs)
}

// hasCapSysResource reports whether this process has CAP_SYS_RESOURCE.
func hasCapSysResource(t *testing.T) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	return false
}
