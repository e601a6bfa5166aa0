package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// enforcedClass is a local class that enforces capacity (enforce is
// "true" by default), enforcedClaim
// the claim "data" of 100Mi of it, and writerPod the pod "writer" using
// it as volume "store".
const enforcedClass = `
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: sized}
provisioner: local.volume-agent.io
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
`

const enforcedClaim = `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  storageClassName: sized
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 100Mi}}
`

const writerPod = `
apiVersion: v1
kind: Pod
metadata: {name: writer}
spec:
  containers: [{name: c, image: busybox}]
  volumes: [{name: store, persistentVolumeClaim: {claimName: data}}]
`

func needTool(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (btrfs-progs, e2fsprogs, util-linux)", tool)
		}
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// btrfsLocalRoot makes a loop-backed btrfs of 512 MiB, with quotas on
// when quota is set, and returns its mount point. Call it before newAgent:
// its cleanup runs after the agent's.
func btrfsLocalRoot(t *testing.T, quota bool) string {
	t.Helper()
	needRoot(t)
	needTool(t, "mkfs.btrfs", "btrfs", "losetup")
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	run(t, "truncate", "-s", "512M", img)
	run(t, "mkfs.btrfs", "-q", img)
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	run(t, "mount", "-o", "loop", img, mnt)
	t.Cleanup(func() {
		if err := exec.Command("umount", mnt).Run(); err != nil {
			_ = exec.Command("umount", "-l", mnt).Run()
		}
	})
	if quota {
		run(t, "btrfs", "quota", "enable", mnt)
	}
	return mnt
}

// imageLocalRoot is a local path root on the file system of the temporary
// directory (not btrfs), where volumes are ext4 images. Call it before
// newAgent: its cleanup, after the agent's, takes down what a failed test
// left mounted or attached.
func imageLocalRoot(t *testing.T) string {
	t.Helper()
	needRoot(t)
	needTool(t, "losetup", "mkfs.ext4", "blkid")
	root := filepath.Join(t.TempDir(), "local")
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(root), &st); err != nil || st.Type == unix.BTRFS_SUPER_MAGIC {
		t.Skipf("the temporary directory is on btrfs (or statfs failed: %v): volumes would be subvolumes", err)
	}
	t.Cleanup(func() {
		for _, m := range mountsUnder(t, root) {
			_ = exec.Command("umount", "-l", m).Run()
		}
		imgs, _ := filepath.Glob(filepath.Join(root, "*.img"))
		for _, img := range imgs {
			out, _ := exec.Command("losetup", "-n", "-O", "NAME", "-j", img).Output()
			for _, dev := range strings.Fields(string(out)) {
				_ = exec.Command("losetup", "-d", dev).Run()
			}
		}
	})
	return root
}

// fill writes up to size bytes into path in 1 MiB steps, then fsyncs, and
// returns how much it wrote and the first error.
func fill(path string, size int) (int, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + 1) // not zeros: nothing may compress or skip them
	}
	n := 0
	for n < size && err == nil {
		var w int
		w, err = f.Write(buf)
		n += w
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// checkEnforced runs the claim of enforcedClass on an agent with root as
// --local-path-root: 150 MiB do not fit in the 100Mi volume (the write
// fails with want), 50 MiB do, and /v1/pods reports them within 5 %,
// measured by method; a crash keeps them. Deleting the claim removes the
// volume.
func checkEnforced(t *testing.T, a *agent, root string, want error, method string) {
	a.start("--provisioners", "local", "--local-path-root", root, "--reclaim-delay", "0s", "--volume-stats-period", "1s")
	a.writeManifest("class.yaml", enforcedClass) // stays: an emptied directory releases nothing
	a.writeManifest("claim.yaml", enforcedClaim)
	a.writeManifest("pod.yaml", writerPod)
	v := a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
	big := filepath.Join(v.Path, "big")
	n, err := fill(big, 150<<20)
	if !errors.Is(err, want) {
		t.Fatalf("writing 150 MiB into a 100Mi volume: %d bytes, then %v; want %v", n, err, want)
	}
	if n > 101<<20 {
		t.Errorf("%d bytes written into a 100Mi volume", n)
	}
	if err := os.Remove(big); err != nil {
		t.Fatal(err)
	}
	if n, err := fill(big, 50<<20); err != nil {
		t.Fatalf("50 MiB into a 100Mi volume: %d bytes, %v", n, err)
	}
	unix.Sync()
	waitFor(t, 30*time.Second, "usage of 50 MiB", func() (bool, string) {
		u := a.usageOf("default", "writer")["store"]
		if u == nil {
			return false, "no usage"
		}
		return within(u.UsedBytes, 50<<20) && u.Method == method, fmt.Sprintf("%+v", *u)
	})

	// A crash and a restart (which recovers every volume) keep the data:
	// nothing is formatted or made again.
	a.restart(true)
	v = a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
	if st, err := os.Stat(filepath.Join(v.Path, "big")); err != nil || st.Size() != 50<<20 {
		t.Errorf("after a restart, the volume's file: %v, %v; want 50 MiB", st, err)
	}

	a.removeManifest("pod.yaml")
	a.removeManifest("claim.yaml")
	waitFor(t, 60*time.Second, "the volume and its record removed", func() (bool, string) {
		recs := capacityRecords(t, root)
		left := append(entries(t, root), recs...)
		return len(left) == 0, fmt.Sprint(left)
	})
}

// TestEnforcedCapacityOnBtrfs: on a btrfs --local-path-root, a 100Mi claim
// is a subvolume with a qgroup limit: 150 MiB fail with EDQUOT.
func TestEnforcedCapacityOnBtrfs(t *testing.T) {
	root := btrfsLocalRoot(t, true)
	a := newAgent(t)
	checkEnforced(t, a, root, unix.EDQUOT, "quota") // its qgroup, through the pod's bind mount
	if out, err := exec.Command("btrfs", "subvolume", "list", "-o", root).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("subvolumes left after the deletion: %s %v", out, err)
	}
}

// TestEnforcedCapacityOnImages: on any other --local-path-root, a 100Mi
// claim is an ext4 image on a loop device: 150 MiB fail with ENOSPC.
func TestEnforcedCapacityOnImages(t *testing.T) {
	root := imageLocalRoot(t)
	a := newAgent(t)
	checkEnforced(t, a, root, unix.ENOSPC, "statfs")
	if len(mountsUnder(t, root)) != 0 {
		t.Errorf("mounts left under the root: %v", mountsUnder(t, root))
	}
}

// TestEnforcedVolumeIsRestorableWithinTheDelay: a released image volume is
// kept in place, mounted and with its data, for --reclaim-delay (the
// aside step records it pending instead of renaming it); the same claim
// added back, after a crash, gets the same PV and its data.
func TestEnforcedVolumeIsRestorableWithinTheDelay(t *testing.T) {
	root := imageLocalRoot(t)
	a := newAgent(t)
	a.start("--provisioners", "local", "--local-path-root", root) // the default delay, 10 minutes
	a.writeManifest("class.yaml", enforcedClass)
	a.writeManifest("claim.yaml", enforcedClaim)
	a.writeManifest("pod.yaml", writerPod)
	v := a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
	if err := os.WriteFile(filepath.Join(v.Path, "written"), []byte("by writer"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.removeManifest("pod.yaml")
	a.removeManifest("claim.yaml")
	waitFor(t, 20*time.Second, "the volume pending deletion", func() (bool, string) {
		c := claimOf(a.claims(), "data")
		return c.PendingDeletion != nil && c.PendingDeletion.Step == "Aside", fmt.Sprintf("%+v", c)
	})
	dir := filepath.Join(root, "default-data-"+v.PV)
	checkFile(t, filepath.Join(dir, "written"), "by writer")
	if got := entries(t, root); len(got) != 2 { // the volume's mount point and its image
		t.Errorf("local path root holds %v while the volume is pending deletion", got)
	}
	a.restart(true)
	a.writeManifest("claim.yaml", enforcedClaim)
	a.writeManifest("pod.yaml", writerPod)
	back := a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
	if back.PV != v.PV {
		t.Errorf("the claim back got PV %s, want its own %s", back.PV, v.PV)
	}
	checkFile(t, filepath.Join(back.Path, "written"), "by writer")
}

// TestEnforcedClassRefusedWithoutQuotas: on a btrfs root with quotas off,
// the agent does not turn them on and warns; a claim of a class that
// enforces capacity (the default) stays Pending with the reason rather
// than get a volume of unchecked size, and one of enforce "false" gets its
// plain directory.
func TestEnforcedClassRefusedWithoutQuotas(t *testing.T) {
	root := btrfsLocalRoot(t, false)
	a := newAgent(t)
	a.start("--provisioners", "local", "--local-path-root", root)
	a.writeManifest("class.yaml", enforcedClass+"---"+fmt.Sprintf(localClassManifest, "plain", "Delete", false))
	a.writeManifest("claim.yaml", enforcedClaim)
	a.writeManifest("plain.yaml", fmt.Sprintf(classClaim, "plain", "plain")+"---"+fmt.Sprintf(classPod, "use-plain", "plain"))
	a.writeManifest("pod.yaml", writerPod)
	waitFor(t, 20*time.Second, "the claim refused with the reason", func() (bool, string) {
		c := claimOf(a.claims(), "data")
		return c.Phase == "Pending" && strings.Contains(c.Error, "btrfs quotas are off") && strings.Contains(c.Error, "btrfs quota enable"), fmt.Sprintf("%+v", c)
	})
	a.waitPod("default", "use-plain", 20*time.Second, ready)
	if !strings.Contains(a.logs.String(), "capacity not enforced on the local path root") {
		t.Error("no warning that capacity is not enforced")
	}
	if out, err := exec.Command("btrfs", "qgroup", "show", root).CombinedOutput(); err == nil {
		t.Errorf("quotas were turned on: %s", out)
	}
}

// TestQuotasTurnedOnServesPendingClaim: the fix the refusal names works
// with no restart. A claim of an enforced class on a btrfs root with
// quotas off waits, its reason naming the command; once it has failed
// for long enough that an uncapped doubling backoff would be at 16 s, the
// operator runs exactly that command, and the claim is Bound, its pod
// ready and its size enforced within 40 s (the backoff of such a failure
// is capped at 5 s; 40 s leaves room for a slow machine), with no restart.
func TestQuotasTurnedOnServesPendingClaim(t *testing.T) {
	root := btrfsLocalRoot(t, false)
	a := newAgent(t)
	a.start("--provisioners", "local", "--local-path-root", root)
	a.writeManifest("class.yaml", enforcedClass)
	a.writeManifest("claim.yaml", strings.Replace(enforcedClaim, "100Mi", "20Mi", 1))
	a.writeManifest("pod.yaml", writerPod)
	fix := "btrfs quota enable " + root
	waitFor(t, 20*time.Second, "the claim refused with the fix", func() (bool, string) {
		c := claimOf(a.claims(), "data")
		return c.Phase == "Pending" && strings.Contains(c.Error, "btrfs quotas are off") && strings.Contains(c.Error, fix), fmt.Sprintf("%+v", c)
	})
	time.Sleep(20 * time.Second) // failures at 1, 2, 4, 8 s: doubling, the next wait would be 16 s
	if c := claimOf(a.claims(), "data"); c.Phase != "Pending" || !strings.Contains(c.Error, fix) {
		t.Fatalf("claim before the fix: %+v; want Pending naming %q", c, fix)
	}
	run(t, "btrfs", "quota", "enable", root)
	took := waitFor(t, 40*time.Second, "the claim bound once quotas are on", func() (bool, string) {
		c := claimOf(a.claims(), "data")
		return c.Phase == "Bound", fmt.Sprintf("%+v", c)
	})
	t.Logf("claim bound %v after btrfs quota enable", took)
	v := a.waitPod("default", "writer", 20*time.Second, ready).volume("store")
	if n, err := fill(filepath.Join(v.Path, "big"), 30<<20); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("30 MiB into a 20Mi claim provisioned once quotas were on: %d bytes, %v; want EDQUOT", n, err)
	}
}

// testLocalEnforced, in cluster mode: a claim of a class that enforces
// capacity gets an image volume of its size, its PV says so
// (volume-agent.io/capacity), and the claim's deletion deletes the PV and
// takes the image down: its mount, loop device and file.
func (env *clusterEnv) testLocalEnforced(t *testing.T) {
	ctx := context.Background()
	ns := "prov-enforced"
	env.cp.CreateNamespace(t, ns)
	node := "node-prov-enforced"
	env.schedulableNode(t, node)
	a := &provAgent{data: imageLocalRoot(t), node: node}
	a.agent = newAgent(t)
	a.start("--kubeconfig", env.nodeKubeconfig(t, node), "--node-name", node, "--provisioners", "local", "--local-path-root", a.data, "--reclaim-delay", "0s")
	env.localClass(t, "va-local-sized", v1.PersistentVolumeReclaimDelete, map[string]string{"enforce": "true"})
	claim := env.dynamicClaim(t, ns, "data", "va-local-sized")
	pod := env.createPod(t, podOn(node, unscheduledPod(ns, "writer", "data")))
	v := a.waitReady(string(pod.UID), 60*time.Second).volume("store")
	pvName := "pvc-" + string(claim.UID)
	pv, err := env.client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Annotations["volume-agent.io/capacity"] != "image" {
		t.Errorf("PV annotations %v, want volume-agent.io/capacity: image", pv.Annotations)
	}
	var st unix.Statfs_t
	// An ext4 of the claim's own: a user can write the 1Gi asked for, and
	// it is not much more (ext4's own metadata, a few percent at 1Gi).
	if err := unix.Statfs(v.Path, &st); err != nil || st.Type != unix.EXT4_SUPER_MAGIC ||
		int64(st.Bavail)*st.Bsize < 1<<30 || int64(st.Blocks)*st.Bsize > 1<<30+1<<30/10 {
		t.Errorf("the pod's volume: statfs %+v, %v; want an ext4 whose users can write 1Gi, of at most 1.1Gi", st, err)
	}
	env.deletePodAndClaim(t, ns, pod.Name, "data")
	env.waitPVGone(t, pvName)
	waitFor(t, 30*time.Second, "the image taken down", func() (bool, string) {
		got := entries(t, a.data)
		return len(got) == 0 && len(mountsUnder(t, a.data)) == 0, fmt.Sprint(got, mountsUnder(t, a.data))
	})
}

// TestNestedSubvolumeInEnforcedClaim: an unprivileged process makes a
// subvolume inside a 20Mi claim's volume on btrfs and writes 30 MiB into
// it at once. Within a few usage periods the agent counts it against the
// claim's size: /v1/pods counts the bytes written inside it, and writes
// into it or the volume fail with EDQUOT. Deleting the claim removes the
// volume, its nested subvolume and their qgroups.
func TestNestedSubvolumeInEnforcedClaim(t *testing.T) {
	root := btrfsLocalRoot(t, true)
	a := newAgent(t)
	a.start("--provisioners", "local", "--local-path-root", root, "--reclaim-delay", "0s", "--volume-stats-period", "1s")
	a.writeManifest("class.yaml", enforcedClass)
	a.writeManifest("claim.yaml", strings.Replace(enforcedClaim, "100Mi", "20Mi", 1))
	a.writeManifest("pod.yaml", writerPod)
	v := a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
	id := subvolumeID(t, v.Path)

	out, err := asNobody(t, v.Path, "sh", "-c", "btrfs subvolume create nested && dd if=/dev/zero of=nested/f bs=1M count=30 conv=fsync")
	written := uint64(30 << 20)
	if err != nil {
		if !strings.Contains(out, "Disk quota exceeded") {
			t.Fatalf("nested subvolume as nobody: %v: %s", err, out)
		}
		written = 0 // limited before the write: refused at once
	}
	waitFor(t, 20*time.Second, "the nested subvolume's bytes counted", func() (bool, string) {
		u := a.usageOf("default", "writer")["store"]
		if u == nil {
			return false, "no usage"
		}
		return u.Method == "quota" && u.UsedBytes >= written, fmt.Sprintf("%+v", *u)
	})
	for _, script := range []string{
		"dd if=/dev/zero of=nested/more bs=1M count=25 conv=fsync",
		"dd if=/dev/zero of=top bs=1M count=25 conv=fsync",
	} {
		if out, err := asNobody(t, v.Path, "sh", "-c", script); err == nil || !strings.Contains(out, "Disk quota exceeded") {
			t.Errorf("%s as nobody in a 20Mi claim: %v: %s; want EDQUOT", script, err, out)
		}
	}

	a.removeManifest("pod.yaml")
	a.removeManifest("claim.yaml")
	waitFor(t, 60*time.Second, "the volume removed with its qgroups", func() (bool, string) {
		out, err := exec.Command("btrfs", "qgroup", "show", "--raw", root).CombinedOutput()
		return len(entries(t, root)) == 0 && err == nil && !strings.Contains(string(out), fmt.Sprintf("0/%d ", id)), fmt.Sprint(entries(t, root), string(out))
	})
}

// TestBtrfsQuotasOffAndOnUnderAClaim: quotas turned off while a 20Mi
// claim's volume is in use drop its qgroup limit; /v1/claims and
// /v1/pods then say its size is not enforced, and once quotas are on
// again the limit is back within a few usage periods (1 s), with no
// restart: 30 MiB fail with EDQUOT.
func TestBtrfsQuotasOffAndOnUnderAClaim(t *testing.T) {
	root := btrfsLocalRoot(t, true)
	a := newAgent(t)
	a.start("--provisioners", "local", "--local-path-root", root, "--reclaim-delay", "0s", "--volume-stats-period", "1s")
	a.writeManifest("class.yaml", enforcedClass)
	a.writeManifest("claim.yaml", strings.Replace(enforcedClaim, "100Mi", "20Mi", 1))
	a.writeManifest("pod.yaml", writerPod)
	v := a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
	said := func() string {
		for _, c := range a.claims() {
			if c.Namespace == "default" && c.Name == "data" {
				return c.LimitNotEnforced
			}
		}
		return "claim not listed"
	}
	waitFor(t, 20*time.Second, "the claim's usage measured", func() (bool, string) {
		u := a.usageOf("default", "writer")["store"]
		return u != nil && u.Method == "quota", fmt.Sprint(u)
	})

	run(t, "btrfs", "quota", "disable", root)
	got := ""
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !strings.Contains(got, "quotas are off"); time.Sleep(200 * time.Millisecond) {
		got = said()
	}
	if !strings.Contains(got, "quotas are off") {
		t.Errorf("with quotas off, the claim's limitNotEnforced %q; want it saying quotas are off", got)
	}
	run(t, "btrfs", "quota", "enable", root)
	waitFor(t, 20*time.Second, "the claim's limit enforced again", func() (bool, string) { s := said(); return s == "", s })
	if n, err := fill(filepath.Join(v.Path, "big"), 30<<20); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("30 MiB into a 20Mi claim after quotas off and on: %d bytes, %v; want EDQUOT", n, err)
	}
}
