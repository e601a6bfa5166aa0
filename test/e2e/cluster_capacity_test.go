package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/volume-agent/volume-agent/test/controlplane"
)

// TestCapacityScheduling runs two agents with the local provisioner beside
// the real kube-scheduler and PV controller. Each publishes, for its node
// and the class, a CSIStorageCapacity of what it can still provision, and
// the CSIDriver local.volume-agent.io (made by the chart's objects) tells
// the scheduler to read them: a 1Gi claim's pod lands on the node whose
// root has room (a host directory, images) and never on the one whose
// root is a 512 MiB btrfs, although nothing pins it; the room of that node
// drops by the claim's size once it is provisioned, before anything is
// written; a 1Ti claim fits neither node, and its pod stays Pending with
// the scheduler's event saying so, its claim Pending without a PV.
func TestCapacityScheduling(t *testing.T) {
	ctx := context.Background()
	small := btrfsLocalRoot(t, true)
	big := imageLocalRoot(t)
	env := startClusterWith(t, controlplane.Options{ControllerManager: true, Scheduler: true})
	ns := "capacity"
	env.cp.CreateNamespace(t, ns)
	agents := map[string]*agent{}
	for node, root := range map[string]string{"node-small": small, "node-big": big} {
		env.schedulableNode(t, node)
		a := newAgent(t)
		// The chart's Role for CSIStorageCapacity objects is in its own
		// namespace, where a DaemonSet's $POD_NAMESPACE points.
		a.env = []string{"POD_NAMESPACE=volume-agent"}
		a.start("--kubeconfig", env.nodeKubeconfig(t, node), "--node-name", node, "--provisioners", "local", "--local-path-root", root, "--reclaim-delay", "0s")
		agents[node] = a
	}
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := env.client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: "va-room"}, Provisioner: "local.volume-agent.io", VolumeBindingMode: &wffc,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	room := func() map[string]int64 {
		list, err := env.client.StorageV1().CSIStorageCapacities("volume-agent").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, o := range list.Items {
			if o.StorageClassName == "va-room" && o.NodeTopology != nil {
				out[o.NodeTopology.MatchLabels[v1.LabelHostname]] = o.Capacity.Value()
			}
		}
		return out
	}
	var before map[string]int64
	waitFor(t, 30*time.Second, "a CSIStorageCapacity of class va-room for each node", func() (bool, string) {
		before = room()
		return len(before) == 2, fmt.Sprint(before)
	})
	t.Logf("room published: %v", before)
	if s := before["node-small"]; s <= 0 || s > 512<<20 {
		t.Errorf("room of a 512 MiB btrfs: %d bytes", s)
	}
	if b := before["node-big"]; b < 2<<30 {
		t.Skipf("the temporary directory's file system has %d bytes free: the test needs 2 GiB", b)
	}

	claim := func(name, size string) *v1.PersistentVolumeClaim {
		c, err := env.client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &v1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1.PersistentVolumeClaimSpec{
				StorageClassName: ptr.To("va-room"),
				AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
				Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	c := claim("fits", "1Gi")
	pod := env.createPod(t, unscheduledPod(ns, "fits", "fits"))
	var node string
	waitFor(t, 60*time.Second, "the pod of the 1Gi claim scheduled", func() (bool, string) {
		p, err := env.client.CoreV1().Pods(ns).Get(ctx, "fits", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		node = p.Spec.NodeName
		return node != "", fmt.Sprintf("%+v", p.Status.Conditions)
	})
	if node != "node-big" {
		t.Fatalf("the pod of a 1Gi claim was placed on %s, whose root has %d bytes of room", node, before[node])
	}
	agents[node].waitReady(string(pod.UID), 90*time.Second)
	waitFor(t, 30*time.Second, "node-big's room less the 1Gi volume", func() (bool, string) {
		now := room()
		// Images are sparse: the room drops by the promise, not by what
		// was written. Other writers on the host's disk move it a little.
		d := before["node-big"] - now["node-big"]
		return d > 1<<30-64<<20 && d < 1<<30+256<<20, fmt.Sprintf("%v, down by %d", now, d)
	})

	claim("huge", "1Ti")
	hugePod := env.createPod(t, unscheduledPod(ns, "huge", "huge"))
	var msg string
	waitFor(t, 60*time.Second, "the scheduler's FailedScheduling event about storage", func() (bool, string) {
		for _, e := range podEvents(t, env.client, hugePod, "FailedScheduling") {
			if strings.Contains(e.Message, "did not have enough free storage") {
				msg = e.Message
				return true, ""
			}
		}
		return false, "no such event yet"
	})
	t.Logf("event: %s", msg)
	time.Sleep(2 * time.Second) // the scheduler has retried meanwhile
	p, err := env.client.CoreV1().Pods(ns).Get(ctx, "huge", metav1.GetOptions{})
	if err != nil || p.Spec.NodeName != "" {
		t.Errorf("the pod of the 1Ti claim: node %q, %v; want it unscheduled", p.Spec.NodeName, err)
	}
	cl, err := env.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "huge", metav1.GetOptions{})
	if err != nil || cl.Status.Phase != v1.ClaimPending || cl.Spec.VolumeName != "" || cl.Annotations["volume.kubernetes.io/selected-node"] != "" {
		t.Errorf("the 1Ti claim: %+v, %v; want it Pending, on no node", cl, err)
	}
	env.deletePodAndClaim(t, ns, "fits", "fits")
	env.waitPVGone(t, "pvc-"+string(c.UID))
	waitFor(t, 30*time.Second, "node-big's room back", func() (bool, string) {
		now := room()
		d := before["node-big"] - now["node-big"]
		return d < 256<<20 && d > -256<<20, fmt.Sprintf("%v, down by %d", now, d)
	})
}
