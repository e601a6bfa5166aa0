package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const sizeLimitPod = `
apiVersion: v1
kind: Pod
metadata: {name: big}
spec:
  containers:
  - {name: c, image: busybox}
  volumes:
  - {name: scratch, emptyDir: {sizeLimit: 1Mi}}
`

// sizeLimitState is a volume's size limit fields in /v1/pods.
type sizeLimitState struct {
	Exceeded bool   `json:"sizeLimitExceeded"`
	Warning  string `json:"warning"`
	Usage    *struct {
		UsedBytes      uint64 `json:"usedBytes"`
		SizeLimitBytes int64  `json:"sizeLimitBytes"`
	} `json:"usage"`
}

// sizeLimitOf returns the size limit fields of volume of pod default/name.
func (a *agent) sizeLimitOf(name, volume string) sizeLimitState {
	a.t.Helper()
	code, body := a.get("/v1/pods")
	if code != 200 {
		a.t.Fatalf("/v1/pods: %d %s", code, body)
	}
	var out struct {
		Pods []struct {
			Namespace, Name string
			Volumes         []struct {
				Name string
				sizeLimitState
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		a.t.Fatalf("/v1/pods: %v", err)
	}
	for _, p := range out.Pods {
		for _, v := range p.Volumes {
			if p.Namespace == "default" && p.Name == name && v.Name == volume {
				return v.sizeLimitState
			}
		}
	}
	return sizeLimitState{}
}

// TestEmptyDirSizeLimitExceeded: on the default root (a file system without
// quotas), a disk emptyDir of sizeLimit 1Mi with 2 MiB written shows
// sizeLimitExceeded in /v1/pods and is reported once (a warn log line: in
// manifest mode there is no API server for events), not at every
// measurement; under the limit again it is not exceeded, and a second
// crossing is reported again. The pod keeps its volume.
func TestEmptyDirSizeLimitExceeded(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("pod.yaml", sizeLimitPod)
	a.start("--volume-stats-period=1s")
	p := a.waitPod("default", "big", 20*time.Second, ready)
	file := filepath.Join(p.volume("scratch").Path, "two")
	write := func() {
		if err := os.WriteFile(file, []byte(strings.Repeat("x", 2<<20)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	reports := func() int { return strings.Count(a.logs.String(), `"msg":"emptyDir volume over its sizeLimit"`) }
	exceeded := func(want bool) {
		t.Helper()
		waitFor(t, 15*time.Second, fmt.Sprintf("sizeLimitExceeded %v", want), func() (bool, string) {
			s := a.sizeLimitOf("big", "scratch")
			b, _ := json.Marshal(s)
			return s.Exceeded == want && s.Usage != nil && (s.Usage.UsedBytes > 1<<20) == want, string(b)
		})
	}
	// Under the limit: measured, not exceeded.
	waitFor(t, 15*time.Second, "a first measurement", func() (bool, string) {
		s := a.sizeLimitOf("big", "scratch")
		return s.Usage != nil, "no usage yet"
	})
	if s := a.sizeLimitOf("big", "scratch"); s.Exceeded || s.Warning != "" || s.Usage.SizeLimitBytes != 1<<20 {
		t.Fatalf("empty volume: %+v, want not exceeded, sizeLimitBytes 1 MiB", s)
	}

	write()
	exceeded(true)
	s := a.sizeLimitOf("big", "scratch")
	if !strings.HasPrefix(s.Warning, `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi": `) || !strings.Contains(s.Warning, " bytes used") {
		t.Errorf("warning %q", s.Warning)
	}
	// Several more measurements (one a second): still one report.
	time.Sleep(3500 * time.Millisecond)
	if n := reports(); n != 1 {
		t.Fatalf("%d size limit reports after several measurements over the limit, want 1:\n%s", n, tail(a.logs.String(), 20))
	}
	if !a.sizeLimitOf("big", "scratch").Exceeded {
		t.Error("no longer exceeded")
	}

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	exceeded(false)
	if s := a.sizeLimitOf("big", "scratch"); s.Warning != "" {
		t.Errorf("under the limit: warning %q", s.Warning)
	}
	write()
	exceeded(true)
	if n := reports(); n != 2 {
		t.Errorf("%d size limit reports after a second crossing, want 2", n)
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("the volume's data: %v; the agent only reports", err)
	}
}

const memorySizePod = `
apiVersion: v1
kind: Pod
metadata: {name: mem}
spec:
  containers:
  - {name: a, image: busybox, resources: {limits: {memory: 16Mi}}}
  - {name: b, image: busybox, resources: {limits: {memory: 8Mi}}}
  volumes:
  - {name: by-limit, emptyDir: {medium: Memory}}
  - {name: by-size, emptyDir: {medium: Memory, sizeLimit: 4Mi}}
  - {name: limit-smaller, emptyDir: {medium: Memory, sizeLimit: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: unlimited}
spec:
  containers:
  - {name: a, image: busybox}
  volumes:
  - {name: by-node, emptyDir: {medium: Memory}}
`

// TestMemoryEmptyDirSize: a Memory emptyDir's tmpfs is sized as the kubelet
// sizes it — the smallest of sizeLimit, the pod's memory limit and the
// node's memory (MemTotal in manifest mode, which has no Node object) —
// never left at the kernel's default of half of RAM.
func TestMemoryEmptyDirSize(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("pods.yaml", memorySizePod)
	a.start()
	mem := a.waitPod("default", "mem", 20*time.Second, ready)
	unlimited := a.waitPod("default", "unlimited", 20*time.Second, ready)
	checkTmpfs(t, mem.volume("by-limit").Path, "size=24576k")
	checkTmpfs(t, mem.volume("by-size").Path, "size=4096k")
	checkTmpfs(t, mem.volume("limit-smaller").Path, "size=24576k")
	checkTmpfs(t, unlimited.volume("by-node").Path, fmt.Sprintf("size=%dk", memTotalKiB(t)))
}

// memTotalKiB is MemTotal of /proc/meminfo.
func memTotalKiB(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) >= 2 && fields[0] == "MemTotal:" {
			n, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}

// testEmptyDirSizes (TestCluster): in cluster mode a disk emptyDir over its
// sizeLimit gets exactly one SizeLimitExceeded Warning event on its pod,
// naming the volume, the limit and the bytes used; and a Memory emptyDir
// with neither sizeLimit nor a memory limit is sized to the Node object's
// allocatable memory.
func (env *clusterEnv) testEmptyDirSizes(t *testing.T) {
	ns := env.namespace(t)
	node := "node-" + ns
	ctx := context.Background()
	n, err := env.client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Allocatable = v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}
	if _, err := env.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := newAgent(t)
	a.start("--kubeconfig", env.agentKubeconfig, "--node-name", node, "--volume-stats-period=1s")
	limit := resource.MustParse("1Mi")
	pod := env.createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big"},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "main", Image: "busybox"}},
			Volumes: []v1.Volume{
				{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: &limit}}},
				{Name: "cache", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
			}},
	})
	p := a.waitReady(string(pod.UID), 30*time.Second)
	checkTmpfs(t, p.volume("cache").Path, "size=65536k")
	if err := os.WriteFile(filepath.Join(p.volume("scratch").Path, "two"), []byte(strings.Repeat("x", 2<<20)), 0o600); err != nil {
		t.Fatal(err)
	}
	var events []v1.Event
	waitFor(t, 20*time.Second, "a SizeLimitExceeded event", func() (bool, string) {
		events = podEvents(t, env.client, pod, "SizeLimitExceeded")
		return len(events) > 0, "none yet"
	})
	time.Sleep(3500 * time.Millisecond) // several more measurements over the limit
	events = podEvents(t, env.client, pod, "SizeLimitExceeded")
	if len(events) != 1 || events[0].Count > 1 || events[0].Type != v1.EventTypeWarning {
		t.Fatalf("SizeLimitExceeded events %+v; want exactly one Warning", events)
	}
	if msg := events[0].Message; !strings.HasPrefix(msg, `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi": `) {
		t.Errorf("event message %q", msg)
	}
}

// loopBtrfs mounts a loop-backed btrfs of 256 MiB with quotas on and
// returns its mount point; skipped without mkfs.btrfs.
func loopBtrfs(t *testing.T) string {
	t.Helper()
	needRoot(t)
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		t.Skip("needs mkfs.btrfs (btrfs-progs)")
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "img"), filepath.Join(dir, "mnt")
	for _, c := range [][]string{{"truncate", "-s", "256M", img}, {"mkfs.btrfs", "-q", img}, {"mkdir", mnt}, {"mount", "-o", "loop", img, mnt}, {"btrfs", "quota", "enable", mnt}} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", c, err, out)
		}
		if c[0] == "mount" {
			t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
		}
	}
	return mnt
}

const btrfsLimitPod = `
apiVersion: v1
kind: Pod
metadata: {name: capped}
spec:
  containers:
  - {name: c, image: busybox}
  volumes:
  - {name: scratch, emptyDir: {sizeLimit: 10Mi}}
`

// TestEmptyDirSizeLimitOnBtrfs: with --root-dir on btrfs with quotas on, a
// 10Mi disk emptyDir rejects the 11th MiB (EDQUOT: the limit is hard); a
// crash and restart keep the same subvolume and its data; the pod's
// removal deletes the subvolume and its qgroup.
func TestEmptyDirSizeLimitOnBtrfs(t *testing.T) {
	root := loopBtrfs(t) // unmounted after the agent's cleanup
	a := newAgent(t)
	a.root = root
	a.writeManifest("pod.yaml", btrfsLimitPod)
	a.start("--volume-stats-period=1s")
	p := a.waitPod("default", "capped", 20*time.Second, ready)
	dir := p.volume("scratch").Path
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil || st.Ino != 256 {
		t.Fatalf("%s: inode %d (%v), want a btrfs subvolume (256)", dir, st.Ino, err)
	}
	written := 0
	var werr error
	for i := range 11 {
		if werr = writeSynced(filepath.Join(dir, fmt.Sprintf("mib-%02d", i)), 1<<20); werr != nil {
			break
		}
		written++
	}
	if !errors.Is(werr, syscall.EDQUOT) || written != 10 {
		t.Fatalf("%d MiB written, then %v; want 10 MiB, then EDQUOT for the 11th", written, werr)
	}
	id := subvolumeID(t, dir)
	// Measured by its qgroup, not walked: the qgroup limit (10 MiB and
	// room for metadata, 11051008 bytes) is the capacity, and the 10 MiB
	// and what the refused 11th left count.
	waitFor(t, 30*time.Second, "usage of 10 MiB by quota", func() (bool, string) {
		u := a.usageOf("default", "capped")["scratch"]
		if u == nil {
			return false, "no usage"
		}
		return u.Method == "quota" && u.CapacityBytes == 11051008 && u.UsedBytes >= 10<<20 && u.UsedBytes <= u.CapacityBytes,
			fmt.Sprintf("%+v", *u)
	})

	a.restart(true)
	p = a.waitPod("default", "capped", 20*time.Second, ready)
	if p.volume("scratch").Path != dir || subvolumeID(t, dir) != id {
		t.Fatalf("after a restart: %s is subvolume %d, want %d", p.volume("scratch").Path, subvolumeID(t, dir), id)
	}
	if _, err := os.Stat(filepath.Join(dir, "mib-00")); err != nil {
		t.Fatalf("data after a restart: %v", err)
	}
	if err := writeSynced(filepath.Join(dir, "more"), 2<<20); !errors.Is(err, syscall.EDQUOT) {
		t.Errorf("2 MiB more after a restart: %v, want EDQUOT (the limit is still there)", err)
	}

	a.removeManifest("pod.yaml")
	waitFor(t, 20*time.Second, "the volume removed", func() (bool, string) {
		_, err := os.Lstat(dir)
		return errors.Is(err, os.ErrNotExist), fmt.Sprint(err)
	})
	waitFor(t, 10*time.Second, "the qgroup gone", func() (bool, string) {
		out, err := exec.Command("btrfs", "qgroup", "show", "--raw", a.root).CombinedOutput()
		return err == nil && !strings.Contains(string(out), fmt.Sprintf("0/%d ", id)), string(out)
	})
}

// subvolumeID is the btrfs subvolume ID of dir.
func subvolumeID(t *testing.T, dir string) uint64 {
	t.Helper()
	out, err := exec.Command("btrfs", "inspect-internal", "rootid", dir).Output()
	if err != nil {
		t.Fatalf("btrfs inspect-internal rootid %s: %v", dir, err)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// writeSynced writes n bytes to a new file and syncs it.
func writeSynced(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = f.Write(make([]byte, n))
	return errors.Join(err, f.Sync(), f.Close())
}

// asNobody runs argv as uid/gid 65534 with no capability (setpriv), in
// dir: the volume's path is below directories only root may enter, so
// the working directory is entered as root first.
func asNobody(t *testing.T, dir string, argv ...string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--"}, argv...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// qgroupLimit is the referenced-bytes limit of qgroup (such as "0/257")
// of the btrfs mounted on root, as btrfs qgroup show --raw -re prints it:
// a number, "none", or "" when the qgroup is not listed.
func qgroupLimit(t *testing.T, root, qgroup string) string {
	t.Helper()
	out, err := exec.Command("btrfs", "qgroup", "show", "--raw", "-re", root).CombinedOutput()
	if err != nil {
		return "error: " + string(out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[0] == qgroup {
			return f[3]
		}
	}
	return ""
}

// TestNestedSubvolumeInSizeLimitEmptyDir: an unprivileged process of the
// pod makes a subvolume inside its 10Mi emptyDir on btrfs (no capability
// needed) and writes 30 MiB into it at once. Within a few usage periods
// the agent limits it with the volume (its own qgroup held to the room
// the volume has left, none once it is past its size): /v1/pods counts
// the bytes written inside it, reports the volume over its sizeLimit
// when they passed it, and a write into the nested subvolume (or one
// made inside it) fails with EDQUOT. The pod's removal deletes the
// volume with its nested subvolumes and leaves no qgroup behind.
func TestNestedSubvolumeInSizeLimitEmptyDir(t *testing.T) {
	root := loopBtrfs(t)
	a := newAgent(t)
	a.root = root
	a.writeManifest("pod.yaml", btrfsLimitPod)
	a.start("--volume-stats-period=1s")
	p := a.waitPod("default", "capped", 20*time.Second, ready)
	dir := p.volume("scratch").Path
	id := subvolumeID(t, dir)

	out, err := asNobody(t, dir, "sh", "-c", "btrfs subvolume create nested && dd if=/dev/zero of=nested/f bs=1M count=30 conv=fsync")
	written := 30 << 20
	if err != nil {
		if !strings.Contains(out, "Disk quota exceeded") {
			t.Fatalf("nested subvolume as nobody: %v: %s", err, out)
		}
		written = 0 // limited before the write: refused at once
	}
	nested := subvolumeID(t, filepath.Join(dir, "nested"))
	waitFor(t, 20*time.Second, "the nested subvolume's bytes counted", func() (bool, string) {
		s := a.sizeLimitOf("capped", "scratch")
		if s.Usage == nil {
			return false, "no usage"
		}
		return s.Usage.UsedBytes >= uint64(written) && s.Exceeded == (written > 10<<20), fmt.Sprintf("%+v %+v", s, *s.Usage)
	})
	for _, argv := range [][]string{
		{"dd", "if=/dev/zero", "of=nested/more", "bs=1M", "count=12", "conv=fsync"},
		{"sh", "-c", "btrfs subvolume create nested/deeper && dd if=/dev/zero of=nested/deeper/f bs=1M count=12 conv=fsync"},
		{"dd", "if=/dev/zero", "of=top", "bs=1M", "count=12", "conv=fsync"},
	} {
		out, err := asNobody(t, dir, argv...)
		if err == nil || !strings.Contains(out, "Disk quota exceeded") {
			t.Errorf("%v as nobody in a 10Mi volume: %v: %s; want EDQUOT", argv, err, out)
		}
	}
	if l := qgroupLimit(t, root, fmt.Sprintf("0/%d", nested)); l == "" || l == "none" {
		t.Errorf("the nested subvolume's qgroup 0/%d has limit %q; want one", nested, l)
	}

	a.removeManifest("pod.yaml")
	waitFor(t, 30*time.Second, "the volume removed", func() (bool, string) {
		_, err := os.Lstat(dir)
		return errors.Is(err, os.ErrNotExist), fmt.Sprint(err)
	})
	waitFor(t, 10*time.Second, "no qgroup of the volume left", func() (bool, string) {
		out, err := exec.Command("btrfs", "qgroup", "show", "--raw", root).CombinedOutput()
		s := string(out)
		return err == nil && !strings.Contains(s, fmt.Sprintf("0/%d ", id)) && !strings.Contains(s, fmt.Sprintf("0/%d ", nested)), s
	})
}

// TestBtrfsQuotasOffAndOn: quotas turned off while the agent runs drop
// every qgroup limit; /v1/pods then says the volume's limit is not
// enforced, and once quotas are on again the limit is made again within
// a few usage periods (1 s here), with no restart: a write past it fails
// with EDQUOT.
func TestBtrfsQuotasOffAndOn(t *testing.T) {
	root := loopBtrfs(t)
	a := newAgent(t)
	a.root = root
	a.writeManifest("pod.yaml", btrfsLimitPod)
	a.start("--volume-stats-period=1s")
	p := a.waitPod("default", "capped", 20*time.Second, ready)
	dir := p.volume("scratch").Path
	notEnforced := func() string {
		code, body := a.get("/v1/pods")
		if code != 200 {
			t.Fatalf("/v1/pods: %d %s", code, body)
		}
		var out struct {
			Pods []struct {
				Name    string
				Volumes []struct {
					Name             string
					LimitNotEnforced string `json:"limitNotEnforced"`
				}
			}
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatal(err)
		}
		for _, p := range out.Pods {
			for _, v := range p.Volumes {
				if p.Name == "capped" && v.Name == "scratch" {
					return v.LimitNotEnforced
				}
			}
		}
		return "volume not listed"
	}
	waitFor(t, 20*time.Second, "the limit enforced", func() (bool, string) { s := notEnforced(); return s == "", s })

	if out, err := exec.Command("btrfs", "quota", "disable", root).CombinedOutput(); err != nil {
		t.Fatalf("btrfs quota disable: %v: %s", err, out)
	}
	// Polled, not waited for with waitFor: the write below says what the
	// old agent did with quotas on again too.
	said := ""
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !strings.Contains(said, "quotas are off"); time.Sleep(200 * time.Millisecond) {
		said = notEnforced()
	}
	if !strings.Contains(said, "quotas are off") {
		t.Errorf("with quotas off, limitNotEnforced %q; want it saying quotas are off", said)
	}
	if out, err := exec.Command("btrfs", "quota", "enable", root).CombinedOutput(); err != nil {
		t.Fatalf("btrfs quota enable: %v: %s", err, out)
	}
	waitFor(t, 20*time.Second, "the limit enforced again", func() (bool, string) { s := notEnforced(); return s == "", s })
	if err := writeSynced(filepath.Join(dir, "big"), 20<<20); !errors.Is(err, syscall.EDQUOT) {
		t.Errorf("20 MiB into a 10Mi volume after quotas off and on: %v, want EDQUOT", err)
	}
}

// TestNestedSubvolumeFoundBetweenMeasurements: with the default usage
// period (a minute, the volume's first measurement anywhere in it), a
// subvolume an unprivileged process makes inside a 10Mi emptyDir is
// found and limited with the volume between measurements (every 2 s):
// 12 MiB written into it again and again fail with EDQUOT within 20 s
// (generous: about 2 s measured), and its own qgroup has a limit.
func TestNestedSubvolumeFoundBetweenMeasurements(t *testing.T) {
	root := loopBtrfs(t)
	a := newAgent(t)
	a.root = root
	a.writeManifest("pod.yaml", btrfsLimitPod)
	a.start()
	p := a.waitPod("default", "capped", 20*time.Second, ready)
	dir := p.volume("scratch").Path
	if out, err := asNobody(t, dir, "btrfs", "subvolume", "create", "nested"); err != nil {
		t.Fatalf("nested subvolume as nobody: %v: %s", err, out)
	}
	took := waitFor(t, 20*time.Second, "12 MiB into the nested subvolume refused (EDQUOT)", func() (bool, string) {
		out, err := asNobody(t, dir, "dd", "if=/dev/zero", "of=nested/f", "bs=1M", "count=12", "conv=fsync")
		return err != nil && strings.Contains(out, "Disk quota exceeded"), fmt.Sprint(err, out)
	})
	t.Logf("FIGURE a nested subvolume's writes refused after %v", took)
	nested := fmt.Sprintf("0/%d", subvolumeID(t, filepath.Join(dir, "nested")))
	if l := qgroupLimit(t, root, nested); l == "" || l == "none" {
		t.Errorf("the nested subvolume's qgroup %s has limit %q; want one", nested, l)
	}
}
