package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/volume-agent/volume-agent/test/controlplane"
	nfstest "github.com/volume-agent/volume-agent/test/nfs"
)

// TestClusterPersistentVolumes runs the agent beside a control plane that
// binds: kube-scheduler and kube-controller-manager with the API server.
func TestClusterPersistentVolumes(t *testing.T) {
	env := startClusterWith(t, controlplane.Options{ControllerManager: true, Scheduler: true})
	t.Run("LocalPVWithWaitForFirstConsumer", env.testLocalPVScheduled)
	t.Run("NFSPVThroughAClaim", env.testNFSPV)
}

// schedulableNode registers a Node as a kubelet would, with room for pods
// and without the not-ready taint a Node gets at creation (no kubelet will
// ever report it ready), so the scheduler places pods on it.
func (env *clusterEnv) schedulableNode(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	if _, err := env.client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: map[string]string{v1.LabelHostname: name},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := env.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status.Capacity = v1.ResourceList{v1.ResourcePods: resource.MustParse("110"), v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi")}
		node.Status.Allocatable = node.Status.Capacity
		node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
		_, err = env.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "node "+name+" without taints", func() (bool, string) {
		n, err := env.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(n.Spec.Taints) == 0 {
			return true, ""
		}
		n.Spec.Taints = nil
		_, err = env.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return false, fmt.Sprint(err)
	})
}

// localPVFor is a local PV of dir on node, in class local-wffc.
func localPVFor(name, node, dir string) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"disk": name}},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			StorageClassName:              "local-wffc",
			PersistentVolumeSource:        v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: dir}},
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
}

// claimFor asks for the PV labelled disk=pv in class local-wffc.
func claimFor(ns, name, pv string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To("local-wffc"),
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Selector:         &metav1.LabelSelector{MatchLabels: map[string]string{"disk": pv}},
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

// unscheduledPod uses claim and has no nodeName: the scheduler places it.
func unscheduledPod(ns, name, claim string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []v1.Container{{Name: "main", Image: "busybox"}},
			Volumes: []v1.Volume{{Name: "store", VolumeSource: v1.VolumeSource{
				PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
			}}},
		},
	}
}

// testLocalPVScheduled: with WaitForFirstConsumer, the scheduler places a
// pod on the node its claim's local PV is on, the PV controller completes
// the binding, and the agent of that node mounts the PV and reports the pod
// ready. A PV of another node, and its pod, are never touched here. The
// claim deleted while the pod runs (held by pvc-protection) leaves the
// pod's volume as it is, saying so.
func (env *clusterEnv) testLocalPVScheduled(t *testing.T) {
	ctx := context.Background()
	ns := "pv-local"
	env.cp.CreateNamespace(t, ns)
	here, there := "node-pv-here", "node-pv-there"
	env.schedulableNode(t, here)
	env.schedulableNode(t, there)
	a := newAgent(t)
	a.start("--kubeconfig", env.agentKubeconfig, "--node-name", here)

	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := env.client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: "local-wffc"},
		Provisioner:       "kubernetes.io/no-provisioner",
		VolumeBindingMode: &wffc,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	diskHere, diskThere := disk(t, "here"), disk(t, "there")
	for _, pv := range []*v1.PersistentVolume{localPVFor("pv-here", here, diskHere), localPVFor("pv-there", there, diskThere)} {
		if _, err := env.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*v1.PersistentVolumeClaim{claimFor(ns, "data-here", "pv-here"), claimFor(ns, "data-there", "pv-there")} {
		if _, err := env.client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	pod := env.createPod(t, unscheduledPod(ns, "db", "data-here"))
	other := env.createPod(t, unscheduledPod(ns, "elsewhere", "data-there"))
	p := a.waitReady(string(pod.UID), 60*time.Second)
	figure(t, "unscheduled pod created to its local PV mounted (scheduler, PV controller, agent)", time.Since(start))

	got, err := env.client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || got.Spec.NodeName != here {
		t.Fatalf("pod placed on %q (%v), want %s", got.Spec.NodeName, err, here)
	}
	v := p.volume("store")
	if v.PV != "pv-here" || v.Claim != "data-here" || v.Path != filepath.Join(a.root, "pods", string(pod.UID), "volumes", "kubernetes.io~local-volume", "pv-here") {
		t.Fatalf("volume = %+v", v)
	}
	checkFile(t, filepath.Join(v.Path, "label"), "here")
	if err := os.WriteFile(filepath.Join(v.Path, "written"), []byte("by db"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(diskHere, "written"), "by db")

	waitFor(t, 60*time.Second, "the other pod placed on the other node", func() (bool, string) {
		o, err := env.client.CoreV1().Pods(ns).Get(ctx, other.Name, metav1.GetOptions{})
		return err == nil && o.Spec.NodeName == there, fmt.Sprint(o.Spec.NodeName, err)
	})
	if _, ok := a.podByUID(string(other.UID)); ok {
		t.Error("the agent serves a pod of another node")
	}
	for _, m := range readMountinfo(t) {
		if m.point == diskThere || filepath.Base(m.point) == "pv-there" {
			t.Errorf("the PV of another node is mounted at %s", m.point)
		}
	}

	// The claim deleted while its pod runs: pvc-protection holds it, and
	// the pod's volume stays as it is, one row saying so, ready.
	if err := env.client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data-here", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	held := a.waitPod(ns, "db", 30*time.Second, func(p apiPod) bool {
		return strings.HasPrefix(p.volume("store").Error, "claim "+ns+"/data-here is being deleted; the volume stays set up")
	})
	if hv := held.volume("store"); len(held.Volumes) != 1 || !held.Ready || hv.State != "Mounted" || hv.Path != v.Path || hv.PV != "pv-here" {
		t.Fatalf("pod db with its claim being deleted = %+v; want its one volume Mounted as it was", held)
	}
	checkFile(t, filepath.Join(v.Path, "written"), "by db")

	if err := env.client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	a.waitPodDirGone(string(pod.UID))
	checkFile(t, filepath.Join(diskHere, "written"), "by db")
	checkFile(t, filepath.Join(diskHere, "label"), "here")
}

// testNFSPV: the PV controller binds a claim to an NFS PV; the agent, in a
// private mount namespace with the test mount.nfs, mounts the export for
// the pod that uses the claim, and takes it down with the pod.
func (env *clusterEnv) testNFSPV(t *testing.T) {
	ctx := context.Background()
	ns := "pv-nfs"
	env.cp.CreateNamespace(t, ns)
	node := "node-pv-nfs"
	env.schedulableNode(t, node)
	a := newAgent(t)
	export := disk(t, "export")
	a.ns = nfstest.NewNamespace(t, nfsHelper)
	srv := nfstest.Start(t, export)
	t.Cleanup(func() {
		if err := a.stop(); err != nil {
			t.Errorf("agent exit: %v", err)
		}
	})
	a.start("--kubeconfig", env.agentKubeconfig, "--node-name", node)

	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-nfs-export"},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			MountOptions:                  strings.Split(srv.MountOptions("soft", "timeo=10", "retrans=1"), ","),
			PersistentVolumeSource:        v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "127.0.0.1", Path: "/"}},
		},
	}
	if _, err := env.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claim := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(""),
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteMany},
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := env.client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := unscheduledPod(ns, "app", "shared")
	pod.Spec.NodeName = node
	pod = env.createPod(t, pod)
	p := a.waitReady(string(pod.UID), 60*time.Second)
	v := p.volume("store")
	if v.PV != "pv-nfs-export" || v.Path != filepath.Join(a.root, "pods", string(pod.UID), "volumes", "kubernetes.io~nfs", "pv-nfs-export") {
		t.Fatalf("volume = %+v", v)
	}
	checkFile(t, a.ns.Path(filepath.Join(v.Path, "label")), "export")
	if err := os.WriteFile(a.ns.Path(filepath.Join(v.Path, "written")), []byte("by app"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(export, "written"), "by app")

	if err := env.client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	a.waitPodDirGone(string(pod.UID))
	if _, ok := a.ns.Mount(v.Path); ok {
		t.Fatal("the NFS mount is still there")
	}
	checkFile(t, filepath.Join(export, "written"), "by app")
}
