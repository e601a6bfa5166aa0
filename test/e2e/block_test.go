package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
)

// blockMode gives a PersistentVolume's or claim's manifest volumeMode Block.
func blockMode(manifest string) string {
	return strings.Replace(manifest, "\nspec:\n", "\nspec:\n  volumeMode: Block\n", 1)
}

// blockPod uses claim data through volumeDevices.
const blockPod = `
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  containers:
  - name: c
    image: busybox
    volumeDevices: [{name: disk, devicePath: /dev/xvda}]
  volumes: [{name: disk, persistentVolumeClaim: {claimName: data}}]
`

// TestLocalRawBlockPVSharedByTwoPods: a loop device as a local PV of
// volumeMode Block, through a claim two pods of the node use in
// volumeDevices. Each pod's device is published at the kubelet's
// volumeDevices path; what is written through one is read through the
// other; a SIGKILL and restart in the middle neither publishes again nor
// breaks what is published, and takes off what a crash left; a pod that
// mounts the claim fails with the kubelet's kind of error; the teardown
// of one pod keeps the other working, and after both nothing the agent
// made remains while the loop device and its backing file are untouched.
func TestLocalRawBlockPVSharedByTwoPods(t *testing.T) {
	a := newAgent(t)
	dev := plugintest.LoopDevice(t)
	backing := loopBackingFile(t, dev)
	a.writeManifest("pv.yaml", blockMode(fmt.Sprintf(localPV, "pv-raw", "30Mi", dev))+"---"+blockMode(strings.Replace(dataClaim, "storage: 1Gi", "storage: 10Mi", 1)))
	a.writeManifest("pods.yaml", fmt.Sprintf(blockPod, "one")+"---"+fmt.Sprintf(blockPod, "two"))
	a.writeManifest("wrong.yaml", strings.Replace(fmt.Sprintf(blockPod, "wrong"), "volumeDevices: [{name: disk, devicePath: /dev/xvda}]",
		"volumeMounts: [{name: disk, mountPath: /data}]", 1))
	a.start()
	one := a.waitPod("default", "one", 20*time.Second, ready)
	two := a.waitPod("default", "two", 10*time.Second, ready)
	ids := map[string]string{}
	for _, p := range []apiPod{one, two} {
		v := p.volume("disk")
		want := filepath.Join(a.root, "pods", p.UID, "volumeDevices", "kubernetes.io~local-volume", "pv-raw")
		if v.Mode != "Block" || v.Path != want || v.PV != "pv-raw" {
			t.Fatalf("pod %s: volume = %+v, want mode Block at %s", p.Name, v, want)
		}
		checkSameDevice(t, v.Path, dev)
		ids[p.Name] = oneMountAt(t, v.Path)
	}
	a.waitPod("default", "wrong", 5*time.Second, func(p apiPod) bool {
		v := p.volume("disk")
		return v.State == "Failed" && strings.Contains(v.Error, `pod default/wrong: volume "disk" has volumeMode Block, but container "c" uses it in volumeMounts`)
	})

	writeDevice(t, one.volume("disk").Path, "through one")
	checkDevice(t, two.volume("disk").Path, "through one")

	// A crash, and a published file a crash left for a pod that is gone.
	a.kill()
	left := filepath.Join(a.root, "pods", "gone-pod", "volumeDevices", "kubernetes.io~local-volume", "pv-raw")
	plugintest.WriteFile(t, left, "")
	a.start()
	a.waitPodDirGone("gone-pod")
	for _, p := range []apiPod{one, two} {
		p = a.waitPod("default", p.Name, 10*time.Second, ready)
		if id := oneMountAt(t, p.volume("disk").Path); id != ids[p.Name] {
			t.Fatalf("pod %s: its device was published again after the restart (mount %s, was %s)", p.Name, id, ids[p.Name])
		}
	}
	checkDevice(t, two.volume("disk").Path, "through one")
	writeDevice(t, two.volume("disk").Path, "through two")
	checkDevice(t, one.volume("disk").Path, "through two")

	// The teardown of one keeps the other working.
	a.writeManifest("pods.yaml", fmt.Sprintf(blockPod, "two"))
	a.waitPodDirGone(one.UID)
	checkDevice(t, two.volume("disk").Path, "through two")
	writeDevice(t, two.volume("disk").Path, "after one went")

	a.removeManifest("pods.yaml")
	a.removeManifest("wrong.yaml")
	a.waitPodDirGone(two.UID)
	if m := mountsUnder(t, a.root); len(m) > 0 {
		t.Fatalf("left mounted: %v", m)
	}
	if entries, err := os.ReadDir(filepath.Join(a.root, "pods")); err != nil || len(entries) > 0 {
		t.Fatalf("left in the pods directory: %v, %v", entries, err)
	}
	if got := loopBackingFile(t, dev); got != backing {
		t.Fatalf("loop device %s is backed by %q after the teardown, was %q", dev, got, backing)
	}
	checkDevice(t, dev, "after one went")
}

// loopBackingFile is the file the loop device dev is attached to.
func loopBackingFile(t *testing.T, dev string) string {
	t.Helper()
	out, err := exec.Command("losetup", "--noheadings", "--output", "BACK-FILE", dev).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup %s: %v: %s", dev, err, out)
	}
	file := strings.TrimSpace(string(out))
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("the backing file of %s: %v", dev, err)
	}
	return file
}

// checkSameDevice checks that path, not a symlink, is the block device dev.
func checkSameDevice(t *testing.T, path, dev string) {
	t.Helper()
	var got, want unix.Stat_t
	if err := unix.Lstat(path, &got); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(dev, &want); err != nil {
		t.Fatal(err)
	}
	if got.Mode&unix.S_IFMT != unix.S_IFBLK || got.Rdev != want.Rdev {
		t.Fatalf("%s: mode %o rdev %d, want the block device %s (rdev %d)", path, got.Mode, got.Rdev, dev, want.Rdev)
	}
}

// oneMountAt returns the mount ID of the one mount at path, and fails t
// when there is not exactly one.
func oneMountAt(t *testing.T, path string) string {
	t.Helper()
	m := mountsAt(t, path)
	if len(m) != 1 {
		t.Fatalf("%d mounts at %s, want 1", len(m), path)
	}
	return m[0].id
}

// writeDevice writes s, padded to a block, at the start of the device at
// path, opened as a container would open its device, and syncs it.
func writeDevice(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(block(s)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// checkDevice checks that the device at path starts with s, padded.
func checkDevice(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, 512)
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, block(s)) {
		t.Fatalf("%s starts with %q, want %q", path, bytes.TrimRight(got, "\x00"), s)
	}
}

func block(s string) []byte {
	b := make([]byte, 512)
	copy(b, s)
	return b
}

// TestProvisionedRawBlockVolume: a claim of volumeMode Block of a class
// that enforces capacity, on a local path root of images, is provisioned
// as an image on a loop device that two pods get as their device; a node
// restart (the agent killed, its mounts and loop devices gone) attaches
// the image again and publishes it again with its data; deleting the
// pods and the claim takes back the image and its loop device.
func TestProvisionedRawBlockVolume(t *testing.T) {
	root := imageLocalRoot(t)
	a := newAgent(t)
	a.writeManifest("class.yaml", enforcedClass+"---"+blockMode(strings.Replace(enforcedClaim, "storage: 100Mi", "storage: 16Mi", 1)))
	a.writeManifest("pods.yaml", fmt.Sprintf(blockPod, "one")+"---"+fmt.Sprintf(blockPod, "two"))
	a.start("--provisioners", "local", "--local-path-root", root, "--reclaim-delay", "0s")
	one := a.waitPod("default", "one", 30*time.Second, ready)
	two := a.waitPod("default", "two", 10*time.Second, ready)
	imgs, err := filepath.Glob(filepath.Join(root, "*.img"))
	if err != nil || len(imgs) != 1 {
		t.Fatalf("images under the local path root: %v, %v; want one", imgs, err)
	}
	for _, p := range []apiPod{one, two} {
		if v := p.volume("disk"); v.Mode != "Block" {
			t.Fatalf("pod %s: volume = %+v, want mode Block", p.Name, v)
		}
		checkSameDevice(t, p.volume("disk").Path, imageLoop(t, imgs[0]))
	}
	writeDevice(t, one.volume("disk").Path, "provisioned, through one")
	checkDevice(t, two.volume("disk").Path, "provisioned, through one")

	// The node restarted: no mount, no loop device is left.
	a.kill()
	for _, p := range []apiPod{one, two} {
		run(t, "umount", p.volume("disk").Path)
	}
	run(t, "losetup", "--detach", imageLoop(t, imgs[0]))
	a.start(a.extra...)
	for _, p := range []apiPod{one, two} {
		p = a.waitPod("default", p.Name, 20*time.Second, ready)
		checkSameDevice(t, p.volume("disk").Path, imageLoop(t, imgs[0]))
		oneMountAt(t, p.volume("disk").Path)
	}
	checkDevice(t, two.volume("disk").Path, "provisioned, through one")

	a.removeManifest("pods.yaml")
	a.waitPodDirGone(one.UID)
	a.waitPodDirGone(two.UID)
	a.writeManifest("class.yaml", enforcedClass)
	waitFor(t, 20*time.Second, "the image deleted with its claim", func() (bool, string) {
		_, err := os.Lstat(imgs[0])
		return os.IsNotExist(err), fmt.Sprint(err)
	})
	if out, _ := exec.Command("losetup", "--associated", imgs[0], "--noheadings").Output(); len(out) > 0 {
		t.Fatalf("loop devices of the deleted image remain: %s", out)
	}
	if m := mountsUnder(t, a.root); len(m) > 0 {
		t.Fatalf("left mounted: %v", m)
	}
}

// imageLoop is the one loop device attached to img.
func imageLoop(t *testing.T, img string) string {
	t.Helper()
	out, err := exec.Command("losetup", "--associated", img, "--noheadings", "--output", "NAME").Output()
	if err != nil || len(strings.Fields(string(out))) != 1 {
		t.Fatalf("loop devices of %s: %q, %v; want one", img, out, err)
	}
	return strings.TrimSpace(string(out))
}

// ephemeralBlockVolume replaces blockPod's claim volume by a generic
// ephemeral volume of volumeMode Block of class sized.
const ephemeralBlockVolume = `volumes:
  - name: disk
    ephemeral:
      volumeClaimTemplate:
        spec:
          storageClassName: sized
          volumeMode: Block
          accessModes: [ReadWriteOnce]
          resources: {requests: {storage: 8Mi}}
`

// TestEphemeralRawBlockVolume: a generic ephemeral volume of volumeMode
// Block, from manifests, is a raw image published as the pod's device,
// and goes with the pod.
func TestEphemeralRawBlockVolume(t *testing.T) {
	root := imageLocalRoot(t)
	a := newAgent(t)
	a.writeManifest("class.yaml", enforcedClass)
	a.writeManifest("pod.yaml", strings.Replace(fmt.Sprintf(blockPod, "scratch"), "volumes: [{name: disk, persistentVolumeClaim: {claimName: data}}]\n", ephemeralBlockVolume, 1))
	a.start("--provisioners", "local", "--local-path-root", root, "--reclaim-delay", "0s")
	p := a.waitPod("default", "scratch", 30*time.Second, ready)
	imgs, err := filepath.Glob(filepath.Join(root, "*.img"))
	if err != nil || len(imgs) != 1 {
		t.Fatalf("images under the local path root: %v, %v; want one", imgs, err)
	}
	if v := p.volume("disk"); v.Mode != "Block" {
		t.Fatalf("volume = %+v, want mode Block", v)
	}
	checkSameDevice(t, p.volume("disk").Path, imageLoop(t, imgs[0]))
	writeDevice(t, p.volume("disk").Path, "scratch")
	a.removeManifest("pod.yaml")
	a.waitPodDirGone(p.UID)
	waitFor(t, 20*time.Second, "the image deleted with its pod's claim", func() (bool, string) {
		_, err := os.Lstat(imgs[0])
		return os.IsNotExist(err), fmt.Sprint(err)
	})
}
