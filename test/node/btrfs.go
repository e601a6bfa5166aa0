package node

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// MountBtrfs makes a btrfs of size bytes in a sparse file of the node's
// directory and mounts it at path (created) in the node's mount namespace,
// with quotas on when quota is set: a real btrfs root for the agent's
// --local-path-root, on which volumes are subvolumes with qgroup limits
// and grow online. Mounted after Start, it reaches the containers that
// mount path with HostToContainer or Bidirectional propagation (/ is
// rshared in the node). The mount goes with the node's mount namespace;
// its loop device, attached by mount -o loop with autoclear, is detached
// then, and stop detaches it if it is still attached.
func (n *Node) MountBtrfs(path string, size int64, quota bool) {
	t := n.t
	t.Helper()
	img := n.path(fmt.Sprintf("btrfs-%d.img", len(n.loops)))
	f, err := os.Create(img)
	if err == nil {
		err = f.Truncate(size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatalf("node: btrfs image: %v", err)
	}
	if out, err := exec.Command("mkfs.btrfs", "-q", img).CombinedOutput(); err != nil {
		t.Fatalf("node: mkfs.btrfs %s: %v: %s", img, err, out)
	}
	n.loops = append(n.loops, img)
	steps := [][]string{{"mkdir", "-p", path}, {"mount", "-o", "loop", img, path}}
	if quota {
		steps = append(steps, []string{"btrfs", "quota", "enable", path})
	}
	for _, s := range steps {
		if out, err := n.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("node: %s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
}

// detachLoops detaches the loop devices still backed by the node's btrfs
// images once the node's mount namespace is gone. The kernel lets go of
// a loop device's file system shortly after the namespace's last process
// exits: wait up to 10 s for autoclear before detaching by hand.
func (n *Node) detachLoops() {
	for _, img := range n.loops {
		deadline := time.Now().Add(10 * time.Second)
		for {
			devs := loopsOf(img)
			if len(devs) == 0 {
				break
			}
			if time.Now().After(deadline) {
				for _, dev := range devs {
					if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
						n.logf("node: losetup -d %s (%s): %v: %s", dev, img, err, out)
					}
				}
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// loopsOf lists the loop devices backed by the file img.
func loopsOf(img string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var devs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)") == img {
			devs = append(devs, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return devs
}
