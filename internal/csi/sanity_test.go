package csi

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

// serve serves d on a socket of its own until the test ends.
func serve(t *testing.T, d *Driver) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "csi.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, sock) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	for i := 0; ; i++ {
		if _, err := os.Stat(sock); err == nil {
			return sock
		}
		if i > 500 {
			t.Fatal("the CSI socket never appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runSanity runs the CSI sanity suite against the driver on a root of
// the file system fs.
func runSanity(t *testing.T, fs string) {
	mnt := loopFS(t, fs, "3G")
	d := newDriver(t, filepath.Join(mnt, "volumes"), 0)
	sock := serve(t, d)
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

// TestSanityBtrfs: the CSI sanity suite on a btrfs root with quotas on
// (volumes are subvolumes with a qgroup limit).
func TestSanityBtrfs(t *testing.T) { runSanity(t, "btrfs") }

// TestSanityImages: the CSI sanity suite on an ext4 root (volumes are
// ext4 images on loop devices; snapshots and clones sparse copies).
func TestSanityImages(t *testing.T) { runSanity(t, "ext4") }
