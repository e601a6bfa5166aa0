package e2e

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/volume-agent/volume-agent/test/controlplane"
	"github.com/volume-agent/volume-agent/test/node"
)

const (
	// csiDriver is the agent's CSI driver name.
	csiDriver = "local.volume-agent.io"
	// nodeLocalRoot is the chart's localPathRoot, as the node sees it: a
	// btrfs with quotas on (node.MountBtrfs), so volumes are subvolumes
	// whose qgroup limit grows online (growing an ext4 image online needs
	// CAP_SYS_RESOURCE, which a test machine in a container may lack).
	nodeLocalRoot = "/var/lib/volume-agent-local"
	// csiReclaimDelay is the chart's reclaimDelay here: short, so that
	// the test sees the deletion, long enough to tell it was waited for.
	csiReclaimDelay = 20 * time.Second
	// The classes: the CSI driver's, and the agent's own in-tree local
	// PVs (the legacy provisioner name) for the comparison.
	csiClass    = "local-csi"
	intreeClass = "local-intree"
)

const mib = 1 << 20

// TestCSIOnARealNode runs the agent as a CSI driver under a stock kubelet
// (test/node), installed by the chart with csi enabled, with the upstream
// external-provisioner, csi-resizer and csi-snapshotter beside it and the
// snapshot-controller, on a btrfs local path root, and checks what a user
// of a CSI driver counts on, in one node start:
//   - a claim of a local.volume-agent.io class is provisioned as a CSI PV,
//     the kubelet registers the driver (CSINode) and publishes the volume
//     through the agent (the pod's volume is a bind of the volume's
//     subvolume), and the container writes 20 MiB into it;
//   - the kubelet's own /metrics reports the claim's used bytes within 5 %
//     of what was written and its capacity as the claim's size, not the
//     root file system's;
//   - the claim, grown through the API, grows online: the claim's capacity
//     reaches the new size with the pod running on, after the kubelet's
//     NodeExpandVolume (its FileSystemResizeSuccessful event), and the
//     container writes past the old limit, which refused it before;
//   - a VolumeSnapshot of it is restored into a new claim and the claim is
//     cloned, both used by a second pod: the restore holds the data of the
//     snapshot's moment, the clone that of its own;
//   - deleting the pods, claims and snapshot leaves, after the reclaim
//     delay and not before it, no PV, no VolumeSnapshotContent, no
//     snapshot on the node (its subvolume and its records go then, the
//     driver having recorded the pending deletion meanwhile), no
//     subvolume or qgroup in the root, and the class's CSIStorageCapacity
//     back at its first figure.
//
// It also times pod creation to Running for a CSI volume and for an
// in-tree local PV of the agent's own provisioner, same node, same run.
func TestCSIOnARealNode(t *testing.T) {
	needRoot(t)
	needTool(t, "mkfs.btrfs", "btrfs")
	// The DaemonSet's agent serves its probes on the node's 127.0.0.1:9810.
	l, err := net.Listen("tcp", "127.0.0.1:9810")
	if err != nil {
		t.Fatalf("the DaemonSet's status port is taken on this machine (is an agent running?): %v", err)
	}
	l.Close()
	start := time.Now()
	cp := controlplane.Start(t, controlplane.Options{ControllerManager: true, Scheduler: true})
	n := node.Start(t, cp, node.Options{Images: csiNodeImages(t),
		// The kubelet measures the pods' volumes every 2 s, not every
		// minute, so that its metrics follow the writes within the test.
		VolumeStatsAggPeriod: 2 * time.Second})
	n.MountBtrfs(nodeLocalRoot, 2<<30, true)
	t.Cleanup(func() { logAgentPodOnFailure(t, n) })
	figure(t, "CSI node: control plane and node Ready", time.Since(start))
	installSnapshotAPI(t, cp)
	values := csiChartValues(cp)
	applyObjects(t, cp, sidecarsReachAPIServer(t, installObjects(t, values), values["extraEnv"].([]any)))
	waitAgentReady(t, cp)
	figure(t, "CSI node: agent pod Ready (with its sidecars) after start", time.Since(start))
	r := &csiRun{t: t, cp: cp, c: cp.Client(), n: n}
	waitCSINode(t, r.c, n.Name())
	cp.CreateNamespace(t, "e2e")
	r.createClasses()
	room := r.waitCapacity(-1)

	inTree := r.compareInTree()
	writer := r.checkWrittenAndMeasured()
	r.checkOnlineExpansion(writer)
	reader := r.checkSnapshotAndClone(writer)
	r.deleteAndCheckNothingLeft(room, inTree, writer, reader)
	figure(t, "CSI node: whole test", time.Since(start))
}

// csiRun is what the steps of TestCSIOnARealNode share.
type csiRun struct {
	t  *testing.T
	cp *controlplane.ControlPlane
	c  kubernetes.Interface
	n  *node.Node
}

// logAgentPodOnFailure logs, when the test failed, the ends of the logs
// of the agent's pod's containers (the agent and the sidecars), which the
// node keeps under /var/log/pods.
func logAgentPodOnFailure(t *testing.T, n *node.Node) {
	if !t.Failed() {
		return
	}
	logs, _ := filepath.Glob(n.Path("/var/log/pods/volume-agent_*/*/*.log"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Logf("%s: %v", l, err)
			continue
		}
		t.Logf("the end of %s:\n%s", l[strings.Index(l, "/var/log/pods/"):], tail(strings.TrimSpace(string(b)), 40))
	}
}

// csiChartValues are the test cluster's values (testClusterValues) with
// the local provisioner, the CSI driver and its sidecars' images, and a
// short reclaim delay.
func csiChartValues(cp *controlplane.ControlPlane) map[string]any {
	v := testClusterValues(cp)
	v["provisioners"] = []any{"local"}
	v["reclaimDelay"] = csiReclaimDelay.String()
	v["csi"] = csiValues()
	return v
}

// sidecarsReachAPIServer gives the DaemonSet's sidecars the agent's
// extraEnv, which points in-cluster clients at the API server's loopback
// address (testClusterValues: the test cluster has no kube-proxy to make
// the "kubernetes" Service's address lead there); the chart gives it to
// the agent's container only.
func sidecarsReachAPIServer(t *testing.T, objs []*unstructured.Unstructured, env []any) []*unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		containers, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range containers {
			c := c.(map[string]any)
			if c["name"] != "volume-agent" {
				list, _ := c["env"].([]any)
				c["env"] = append(list, env...)
			}
			containers[i] = c
		}
		if err := unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers"); err != nil {
			t.Fatal(err)
		}
	}
	return objs
}

// waitCSINode waits until the kubelet registered the driver on the node:
// its CSINode lists it with the node's name as node ID and the hostname
// topology key.
func waitCSINode(t *testing.T, c kubernetes.Interface, nodeName string) {
	t.Helper()
	waitEvery(t, 2*time.Minute, 500*time.Millisecond, "CSINode "+nodeName+" to list "+csiDriver, func() (bool, string) {
		cn, err := c.StorageV1().CSINodes().Get(context.Background(), nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, d := range cn.Spec.Drivers {
			if d.Name == csiDriver {
				ok := d.NodeID == nodeName && slices.Equal(d.TopologyKeys, []string{v1.LabelHostname})
				return ok, fmt.Sprintf("%+v", d)
			}
		}
		return false, fmt.Sprintf("%+v", cn.Spec.Drivers)
	})
}

// createClasses creates the CSI driver's class and the in-tree one (both
// WaitForFirstConsumer, enforced capacity, growable); the chart made the
// VolumeSnapshotClass.
func (r *csiRun) createClasses() {
	t, cp := r.t, r.cp
	t.Helper()
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	for name, provisioner := range map[string]string{csiClass: csiDriver, intreeClass: "volume-agent.io/local"} {
		_, err := cp.Client().StorageV1().StorageClasses().Create(context.Background(), &storagev1.StorageClass{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner,
			VolumeBindingMode: &wffc, AllowVolumeExpansion: ptr.To(true),
			Parameters: map[string]string{"enforce": "true"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// claimSpec is a ReadWriteOnce claim of size MiB of class, with an
// optional data source.
func claimSpec(name, class string, size int64, source *v1.TypedLocalObjectReference) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "e2e"},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(class),
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{
				v1.ResourceStorage: *resource.NewQuantity(size*mib, resource.BinarySI)}},
			DataSource: source,
		},
	}
}

func createClaim(t *testing.T, c kubernetes.Interface, claim *v1.PersistentVolumeClaim) {
	t.Helper()
	if _, err := c.CoreV1().PersistentVolumeClaims("e2e").Create(context.Background(), claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// boundPV returns the PV bound to the claim.
func boundPV(t *testing.T, c kubernetes.Interface, claim string) *v1.PersistentVolume {
	t.Helper()
	pvc, err := c.CoreV1().PersistentVolumeClaims("e2e").Get(context.Background(), claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := c.CoreV1().PersistentVolumes().Get(context.Background(), pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the PV of claim %s: %v", claim, err)
	}
	return pv
}

// compareInTree times a pod of a new claim of the in-tree class, placed
// by the scheduler, from create to Running, as checkWrittenAndMeasured
// does for the CSI class, and returns it.
func (r *csiRun) compareInTree() *shellPod {
	t, c := r.t, r.c
	t.Helper()
	createClaim(t, c, claimSpec("intree", intreeClass, 64, nil))
	pod, took := startShellPod(t, r.n, c, shellPodSpec("intree", map[string]string{"/data": "intree"}))
	figure(t, "CSI node: pod with a new in-tree local PV, create to Running", took)
	if pv := boundPV(t, c, "intree"); pv.Spec.Local == nil {
		t.Fatalf("the in-tree class's PV is not a local PV: %+v", pv.Spec.PersistentVolumeSource)
	}
	return pod
}

// checkWrittenAndMeasured runs pod writer with a new claim "data" of the
// CSI class, checks the PV, the publication and the kubelet's metrics of
// 20 MiB written by the container, and returns the pod.
func (r *csiRun) checkWrittenAndMeasured() *shellPod {
	t, c := r.t, r.c
	t.Helper()
	createClaim(t, c, claimSpec("data", csiClass, 64, nil))
	writer, took := startShellPod(t, r.n, c, shellPodSpec("writer", map[string]string{"/data": "data"}))
	figure(t, "CSI node: pod with a new CSI volume, create to Running", took)
	pv := boundPV(t, c, "data")
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != csiDriver {
		t.Fatalf("claim data's PV %s is not a CSI PV of %s: %+v", pv.Name, csiDriver, pv.Spec.PersistentVolumeSource)
	}
	r.checkPublished(writer, pv)

	writer.run("dd if=/dev/urandom of=/data/a bs=1M count=20 conv=fsync 2>&1")
	r.checkKubeletStats("data", 20*mib, 64*mib)
	return writer
}

// checkPublished checks that the kubelet's target path for the pod's CSI
// volume is a mount of the volume's own subvolume (the volume ID is its
// directory in the btrfs root): the agent's NodePublishVolume made it.
func (r *csiRun) checkPublished(pod *shellPod, pv *v1.PersistentVolume) {
	t := r.t
	t.Helper()
	target := filepath.Join("/var/lib/kubelet/pods", string(pod.pod.UID), "volumes/kubernetes.io~csi", pv.Name, "mount")
	mounts, err := r.n.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, m := range mounts {
		if m.Mountpoint == target {
			if m.FSType != "btrfs" || m.Root != "/"+pv.Spec.CSI.VolumeHandle {
				t.Errorf("the pod's CSI volume at %s is %s of %s, want btrfs of /%s", target, m.FSType, m.Root, pv.Spec.CSI.VolumeHandle)
			}
			return
		}
		if strings.Contains(m.Mountpoint, string(pod.pod.UID)) {
			seen = append(seen, m.Mountpoint)
		}
	}
	t.Errorf("no mount at the kubelet's target path %s; the pod's mounts: %v", target, seen)
}

// checkKubeletStats waits until the kubelet's /metrics reports the claim
// with used bytes within 5 % of used and capacity bytes equal to size.
func (r *csiRun) checkKubeletStats(claim string, used, size int64) {
	t, n, cp := r.t, r.n, r.cp
	t.Helper()
	waitEvery(t, 2*time.Minute, time.Second, fmt.Sprintf("the kubelet's metrics of claim %s: %d bytes used (±5 %%) of %d", claim, used, size), func() (bool, string) {
		u, okU := kubeletVolumeStat(t, n, cp, "kubelet_volume_stats_used_bytes", "e2e", claim)
		c, okC := kubeletVolumeStat(t, n, cp, "kubelet_volume_stats_capacity_bytes", "e2e", claim)
		detail := fmt.Sprintf("used %v (%v), capacity %v (%v)", u, okU, c, okC)
		return okU && okC && math.Abs(u-float64(used)) <= 0.05*float64(used) && c == float64(size), detail
	})
}

// checkOnlineExpansion fills claim data past its size (refused), grows
// it from 64 to 128 MiB through the API and checks that it grew online:
// the kubelet's metrics show the new size, and the container writes past
// the old one. (The container's df shows the root file system's size: a
// btrfs qgroup limit is not what statfs reports.)
func (r *csiRun) checkOnlineExpansion(writer *shellPod) {
	t, c, claim := r.t, r.c, "data"
	t.Helper()
	ctx := context.Background()
	if out, rc := writer.try("dd if=/dev/zero of=/data/x bs=1M count=64 conv=fsync 2>&1"); rc == 0 || !strings.Contains(out, "Disk quota exceeded") {
		t.Errorf("writing 84 MiB into a claim of 64 MiB: exit %d, %s; want EDQUOT", rc, out)
	}
	writer.run("rm -f /data/x && sync")

	pvc, err := c.CoreV1().PersistentVolumeClaims("e2e").Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvc.Spec.Resources.Requests[v1.ResourceStorage] = *resource.NewQuantity(128*mib, resource.BinarySI)
	if _, err := c.CoreV1().PersistentVolumeClaims("e2e").Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitEvery(t, 3*time.Minute, 500*time.Millisecond, "claim "+claim+" to reach 128Mi", func() (bool, string) {
		got, err := c.CoreV1().PersistentVolumeClaims("e2e").Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		size := got.Status.Capacity[v1.ResourceStorage]
		return size.Value() == 128*mib && len(got.Status.Conditions) == 0, fmt.Sprintf("%+v", got.Status)
	})
	figure(t, "CSI node: claim grown online, update to status", time.Since(start))
	if len(podEvents(t, c, writer.pod, "FileSystemResizeSuccessful")) == 0 {
		t.Errorf("no FileSystemResizeSuccessful event on pod writer: the kubelet did not call NodeExpandVolume")
	}
	p, err := c.CoreV1().Pods("e2e").Get(ctx, writer.pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := p.Status.ContainerStatuses; p.UID != writer.pod.UID || len(st) != 1 || st[0].RestartCount != 0 ||
		st[0].ContainerID != writer.pod.Status.ContainerStatuses[0].ContainerID {
		t.Errorf("the pod was restarted by the expansion: %+v", st)
	}
	// The container writes past the old size: 20 + 60 MiB.
	writer.run("dd if=/dev/urandom of=/data/b bs=1M count=60 conv=fsync 2>&1")
	r.checkKubeletStats(claim, 80*mib, 128*mib)
}
