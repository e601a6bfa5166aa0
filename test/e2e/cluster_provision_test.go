package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/volume-agent/volume-agent/test/controlplane"
)

// TestClusterDynamicProvisioning runs agents with --provisioners beside the
// real scheduler and PV controller: the scheduler picks a node for a pod
// whose claim has a WaitForFirstConsumer class of volume-agent.io/local,
// that node's agent (and only it) provisions, the PV controller binds, and
// the agent mounts.
func TestClusterDynamicProvisioning(t *testing.T) {
	env := startClusterWith(t, controlplane.Options{ControllerManager: true, Scheduler: true})
	t.Run("LocalOnTheSelectedNode", env.testLocalProvisioning)
	t.Run("LocalKilledBetweenDirectoryAndPV", env.testLocalProvisionCrash)
	t.Run("LocalClaimDeletedWhileProvisioning", env.testLocalClaimDeletedMidway)
	t.Run("LocalKilledThenClaimDeleted", env.testLocalKilledThenClaimDeleted)
	t.Run("LocalRootReadOnlyGivesTheClaimBack", env.testLocalReschedule)
	t.Run("LocalReclaimDeferredBusyAndKilled", env.testLocalReclaimDeferred)
	t.Run("LocalRecordedStepNeverOverridesLiveFacts", env.testRecordedStepRefused)
	t.Run("NodeRestrictionPolicy", env.testNodeRestrictionPolicy)
	t.Run("NFSSubdirLeaderFailover", env.testNFSSubdirFailover)
	t.Run("NFSSubdirPathPatternSafety", env.testNFSSubdirPatternSafety)
	// Last: its node stays registered, without an agent, once it is done.
	t.Run("LocalEnforcedImage", env.testLocalEnforced)
	t.Run("LocalEnforcedExpand", env.testLocalEnforcedExpand) // the same, for its node
}

// provAgent is an agent running the local provisioner, with its own
// --local-path-root.
type provAgent struct {
	*agent
	node, data string
}

// startProvAgents registers nodes and starts one provisioning agent for
// each, with env added to their environment.
func (env *clusterEnv) startProvAgents(t *testing.T, env2 []string, nodes ...string) []*provAgent {
	var out []*provAgent
	for _, n := range nodes {
		env.schedulableNode(t, n)
		a := &provAgent{agent: newAgent(t), node: n, data: filepath.Join(t.TempDir(), "local")}
		a.env = env2
		// No reclaim delay: these tests check what deletion does
		// (TestClusterReclaimDelay checks the delay).
		a.start("--kubeconfig", env.nodeKubeconfig(t, n), "--node-name", n, "--provisioners", "local", "--local-path-root", a.data, "--reclaim-delay", "0s")
		out = append(out, a)
	}
	return out
}

// localClass creates a WaitForFirstConsumer class of volume-agent.io/local,
// of plain directories (enforce "false") unless params say otherwise.
func (env *clusterEnv) localClass(t *testing.T, name string, reclaim v1.PersistentVolumeReclaimPolicy, params map[string]string) {
	if _, ok := params["enforce"]; !ok {
		params = maps.Clone(params)
		if params == nil {
			params = map[string]string{}
		}
		params["enforce"] = "false"
	}
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	_, err := env.client.StorageV1().StorageClasses().Create(context.Background(), &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "volume-agent.io/local",
		VolumeBindingMode: &wffc, ReclaimPolicy: &reclaim, Parameters: params,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// dynamicClaim asks class for 1Gi.
func (env *clusterEnv) dynamicClaim(t *testing.T, ns, name, class string) *v1.PersistentVolumeClaim {
	c, err := env.client.CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(class),
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// entries lists the names in dir ("" for none, and for no dir), but for
// the agent's records in a local path root: the capacity backend's
// (.capacity), which every local path root of a privileged agent has,
// those of provisionings without a PV yet (.provisioning) and the CSI
// driver's (.csi); the snapshots' directory (.snapshots) is listed by
// what it holds.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, d := range des {
		switch d.Name() {
		case ".capacity", ".provisioning", ".csi":
		case ".snapshots":
			// The snapshots' directory is always there; a snapshot in
			// it is an entry of its own.
			for _, s := range entries(t, filepath.Join(dir, d.Name())) {
				out = append(out, filepath.Join(d.Name(), s))
			}
		default:
			out = append(out, d.Name())
		}
	}
	return out
}

// capacityRecords lists the capacity backend's records under root's
// .capacity: the volumes' and archives' (<name>.json), and the snapshots'
// (snapshots/<name>.json, whose directory is always there).
func capacityRecords(t *testing.T, root string) []string {
	t.Helper()
	dir := filepath.Join(root, ".capacity")
	var out []string
	for _, name := range entries(t, dir) {
		if name != "snapshots" {
			out = append(out, name)
			continue
		}
		for _, s := range entries(t, filepath.Join(dir, name)) {
			out = append(out, filepath.Join(name, s))
		}
	}
	return out
}

// waitGone waits until the PV is deleted.
func (env *clusterEnv) waitPVGone(t *testing.T, name string) {
	waitFor(t, 60*time.Second, "PersistentVolume "+name+" deleted", func() (bool, string) {
		pv, err := env.client.CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprint(pv.Status.Phase, err)
	})
}

// deletePodAndClaim deletes the pod at once, then the claim.
func (env *clusterEnv) deletePodAndClaim(t *testing.T, ns, pod, claim string) {
	ctx := context.Background()
	if pod != "" {
		if err := env.client.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, claim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// testLocalProvisioning: two agents on two nodes; a claim per reclaim
// behaviour (Delete, Delete with archiveOnDelete, Retain), each used by an
// unscheduled pod. For each: the scheduler picks a node, only that node's
// agent makes the directory and the PV, the pod turns ready with the PV
// mounted, a file written survives the pod, and deleting the claim removes,
// archives or keeps the directory and PV as the class says.
func (env *clusterEnv) testLocalProvisioning(t *testing.T) {
	ctx := context.Background()
	ns := "prov-local"
	env.cp.CreateNamespace(t, ns)
	agents := env.startProvAgents(t, nil, "node-prov-a", "node-prov-b")
	env.localClass(t, "va-local", v1.PersistentVolumeReclaimDelete, nil)
	env.localClass(t, "va-local-archive", v1.PersistentVolumeReclaimDelete, map[string]string{"archiveOnDelete": "true"})
	env.localClass(t, "va-local-retain", v1.PersistentVolumeReclaimRetain, nil)

	for _, tc := range []struct{ claim, class string }{
		{"deleted", "va-local"}, {"archived", "va-local-archive"}, {"retained", "va-local-retain"},
	} {
		claim := env.dynamicClaim(t, ns, tc.claim, tc.class)
		start := time.Now()
		pod := env.createPod(t, unscheduledPod(ns, "use-"+tc.claim, tc.claim))
		var node string
		waitFor(t, 60*time.Second, "pod "+pod.Name+" scheduled", func() (bool, string) {
			p, err := env.client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			node = p.Spec.NodeName
			return err == nil && node != "", fmt.Sprint(err, p.Status.Conditions)
		})
		i := slices.IndexFunc(agents, func(a *provAgent) bool { return a.node == node })
		here, there := agents[i], agents[1-i]
		p := here.waitReady(string(pod.UID), 60*time.Second)
		figure(t, "unscheduled pod to its provisioned local volume mounted ("+tc.class+")", time.Since(start))

		pvName := "pvc-" + string(claim.UID)
		dirName := ns + "-" + tc.claim + "-" + pvName
		dir := filepath.Join(here.data, dirName)
		pv, err := env.client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkProvisionedPV(t, pv, claim, here.node, dir)
		if got := entries(t, here.data); !slices.Equal(got, []string{dirName}) {
			t.Errorf("%s holds %v, want only %s", here.data, got, dirName)
		}
		if got := entries(t, there.data); len(got) != 0 {
			t.Errorf("the other node's agent provisioned: %s holds %v", there.data, got)
		}
		v := p.volume("store")
		if v.PV != pvName || v.Path != filepath.Join(here.root, "pods", string(pod.UID), "volumes", "kubernetes.io~local-volume", pvName) {
			t.Fatalf("volume = %+v", v)
		}
		if err := os.WriteFile(filepath.Join(v.Path, "written"), []byte("by "+pod.Name), 0o644); err != nil {
			t.Fatal(err)
		}
		if len(claimEvents(t, env, claim, "ProvisioningSucceeded")) == 0 {
			t.Errorf("no ProvisioningSucceeded event on claim %s", claim.Name)
		}

		if err := env.client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		here.waitPodDirGone(string(pod.UID))
		checkFile(t, filepath.Join(dir, "written"), "by "+pod.Name)

		env.deletePodAndClaim(t, ns, "", tc.claim)
		switch tc.class {
		case "va-local":
			env.waitPVGone(t, pvName)
			if got := entries(t, here.data); len(got) != 0 {
				t.Errorf("after the claim's deletion %s holds %v", here.data, got)
			}
		case "va-local-archive":
			env.waitPVGone(t, pvName)
			checkFile(t, filepath.Join(here.data, "archived-"+dirName, "written"), "by "+pod.Name)
			if got := entries(t, here.data); !slices.Equal(got, []string{"archived-" + dirName}) {
				t.Errorf("after archiving %s holds %v", here.data, got)
			}
			_ = os.RemoveAll(filepath.Join(here.data, "archived-"+dirName))
		case "va-local-retain":
			waitFor(t, 30*time.Second, "PV "+pvName+" Released", func() (bool, string) {
				pv, err := env.client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
				return err == nil && pv.Status.Phase == v1.VolumeReleased, fmt.Sprint(pv.Status.Phase, err)
			})
			time.Sleep(3 * time.Second) // a deleter would act within a pass; none must
			if _, err := env.client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{}); err != nil {
				t.Errorf("a Retain PV was deleted: %v", err)
			}
			checkFile(t, filepath.Join(dir, "written"), "by "+pod.Name)
			if err := env.client.CoreV1().PersistentVolumes().Delete(ctx, pvName, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			_ = os.RemoveAll(dir)
		}
	}
}

// checkProvisionedPV checks what the local provisioner wrote into pv.
func checkProvisionedPV(t *testing.T, pv *v1.PersistentVolume, claim *v1.PersistentVolumeClaim, node, dir string) {
	t.Helper()
	ref := pv.Spec.ClaimRef
	switch {
	case pv.Annotations["pv.kubernetes.io/provisioned-by"] != "volume-agent.io/local":
		t.Errorf("PV annotations %v: no provisioned-by", pv.Annotations)
	case pv.Spec.Local == nil || pv.Spec.Local.Path != dir:
		t.Errorf("PV source %+v, want local %s", pv.Spec.PersistentVolumeSource, dir)
	case ref == nil || ref.UID != claim.UID || ref.Name != claim.Name || ref.Namespace != claim.Namespace:
		t.Errorf("PV claimRef %+v, want claim %s/%s %s", ref, claim.Namespace, claim.Name, claim.UID)
	case pv.Status.Phase != v1.VolumeBound:
		t.Errorf("PV phase %s, want Bound", pv.Status.Phase)
	case !strings.Contains(fmt.Sprint(pv.Spec.NodeAffinity), node):
		t.Errorf("PV node affinity %v, want %s", pv.Spec.NodeAffinity, node)
	case pv.Spec.Capacity.Storage().String() != "1Gi" || pv.Spec.StorageClassName != *claim.Spec.StorageClassName:
		t.Errorf("PV capacity %v class %s", pv.Spec.Capacity, pv.Spec.StorageClassName)
	}
}

// claimEvents lists the events about a claim with the given reason.
func claimEvents(t *testing.T, env *clusterEnv, claim *v1.PersistentVolumeClaim, reason string) []v1.Event {
	t.Helper()
	var out []v1.Event
	waitFor(t, 10*time.Second, reason+" event on "+claim.Name, func() (bool, string) {
		list, err := env.client.CoreV1().Events(claim.Namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		out = nil
		for _, e := range list.Items {
			if e.InvolvedObject.UID == claim.UID && e.Reason == reason {
				out = append(out, e)
			}
		}
		return len(out) > 0, fmt.Sprint(len(list.Items), " events")
	})
	return out
}

// pausedProvisioning starts a provisioning agent for node whose
// provisionings pause between the directory and the PV, a class and a
// claim "data" of it in the new namespace ns, and a pod using the claim,
// and waits for the directory.
func (env *clusterEnv) pausedProvisioning(t *testing.T, ns, node, pause, class string, reclaim v1.PersistentVolumeReclaimPolicy,
	params map[string]string) (*provAgent, *v1.PersistentVolumeClaim, *v1.Pod) {
	t.Helper()
	env.cp.CreateNamespace(t, ns)
	a := env.startProvAgents(t, []string{"VOLUME_AGENT_TEST_PROVISION_PAUSE=" + pause}, node)[0]
	env.localClass(t, class, reclaim, params)
	claim := env.dynamicClaim(t, ns, "data", class)
	pod := env.createPod(t, podOn(a.node, unscheduledPod(ns, "db", "data")))
	waitFor(t, 60*time.Second, "the directory made", func() (bool, string) {
		got := entries(t, a.data)
		return len(got) == 1, fmt.Sprint(got)
	})
	return a, claim, pod
}

// testLocalProvisionCrash: the agent is SIGKILLed after it made the
// directory and before it created the PV; after a restart there is exactly
// one directory and one PV for the claim, and the pod turns ready.
func (env *clusterEnv) testLocalProvisionCrash(t *testing.T) {
	ctx := context.Background()
	ns := "prov-crash"
	a, claim, pod := env.pausedProvisioning(t, ns, "node-prov-crash", "30s", "va-local-crash", v1.PersistentVolumeReclaimDelete, nil)
	a.kill()
	if _, err := env.client.CoreV1().PersistentVolumes().Get(ctx, "pvc-"+string(claim.UID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a PV exists before the restart (%v): the pause did not hold", err)
	}
	a.env = nil
	a.start(a.extra...)
	a.waitReady(string(pod.UID), 60*time.Second)
	if got := entries(t, a.data); !slices.Equal(got, []string{ns + "-data-pvc-" + string(claim.UID)}) {
		t.Errorf("after the restart %s holds %v, want one directory", a.data, got)
	}
	pvs, err := env.client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, pv := range pvs.Items {
		if ref := pv.Spec.ClaimRef; ref != nil && ref.UID == claim.UID {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d PVs for the claim, want 1", n)
	}
	env.deletePodAndClaim(t, ns, pod.Name, "data")
	env.waitPVGone(t, "pvc-"+string(claim.UID))
}

// testLocalKilledThenClaimDeleted: the agent is killed after it made the
// directory and before it created the PV, and the claim is deleted while
// it is down. The directory, which no PV ever pointed at, is taken back at
// the next start, from the record written before it was made; no PV is
// made.
func (env *clusterEnv) testLocalKilledThenClaimDeleted(t *testing.T) {
	ctx := context.Background()
	ns := "prov-killed-deleted"
	a, claim, pod := env.pausedProvisioning(t, ns, "node-prov-killed-deleted", "30s", "va-local-killed-deleted", v1.PersistentVolumeReclaimRetain, nil)
	a.kill()
	records := filepath.Join(a.data, ".provisioning")
	if got, _ := os.ReadDir(records); len(got) != 1 || got[0].Name() != "pvc-"+string(claim.UID)+".json" {
		t.Fatalf("records of unfinished provisionings: %v; want the claim's", got)
	}
	env.deletePodAndClaim(t, ns, pod.Name, "data")
	waitFor(t, 30*time.Second, "the claim gone", func() (bool, string) {
		_, err := env.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	a.env = nil
	a.start(a.extra...)
	// The record goes after the directory (Abandon: Delete, then Commit).
	waitFor(t, 30*time.Second, "the directory taken back, and its record gone", func() (bool, string) {
		got := entries(t, a.data)
		left, err := os.ReadDir(records)
		return len(got) == 0 && err == nil && len(left) == 0, fmt.Sprint(got, left, err)
	})
	if _, err := env.client.CoreV1().PersistentVolumes().Get(ctx, "pvc-"+string(claim.UID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("PV of the deleted claim: %v, want not found", err)
	}
}

// testLocalClaimDeletedMidway: the claim (and its pod) are deleted after
// the agent made the directory and before it created the PV; nothing is
// left behind: no directory, no PV.
func (env *clusterEnv) testLocalClaimDeletedMidway(t *testing.T) {
	ctx := context.Background()
	ns := "prov-midway"
	a, claim, pod := env.pausedProvisioning(t, ns, "node-prov-midway", "5s", "va-local-midway", v1.PersistentVolumeReclaimRetain, map[string]string{"archiveOnDelete": "true"})
	env.deletePodAndClaim(t, ns, pod.Name, "data")
	waitFor(t, 30*time.Second, "the directory removed", func() (bool, string) {
		got := entries(t, a.data)
		return len(got) == 0, fmt.Sprint(got)
	})
	time.Sleep(2 * time.Second) // a PV created late would show now
	if _, err := env.client.CoreV1().PersistentVolumes().Get(ctx, "pvc-"+string(claim.UID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("PV of the deleted claim: %v, want not found", err)
	}
	if got := entries(t, a.data); len(got) != 0 {
		t.Errorf("%s holds %v after the claim's deletion", a.data, got)
	}
}

// podOn makes the scheduler place pod on node (earlier subtests' nodes
// remain, without their agents).
func podOn(node string, pod *v1.Pod) *v1.Pod {
	pod.Spec.NodeSelector = map[string]string{v1.LabelHostname: node}
	return pod
}

// testLocalReschedule: a node whose --local-path-root is read-only cannot
// provision: the agent reports ProvisioningFailed on the claim and removes
// volume.kubernetes.io/selected-node, so the scheduler chooses again (here
// the same node, the only one the pod may use); once the root is writable
// the claim is provisioned and the pod turns ready.
func (env *clusterEnv) testLocalReschedule(t *testing.T) {
	ctx := context.Background()
	ns := "prov-resched"
	env.cp.CreateNamespace(t, ns)
	node := "node-prov-resched"
	data := filepath.Join(t.TempDir(), "local")
	if err := os.Mkdir(data, 0o711); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", data).CombinedOutput(); err != nil {
		t.Fatalf("mount a read-only tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", data).Run() })
	env.schedulableNode(t, node)
	a := newAgent(t)
	a.start("--kubeconfig", env.nodeKubeconfig(t, node), "--node-name", node, "--provisioners", "local", "--local-path-root", data, "--reclaim-delay", "0s")
	env.localClass(t, "va-local-resched", v1.PersistentVolumeReclaimDelete, nil)

	claim := env.dynamicClaim(t, ns, "data", "va-local-resched")
	w, err := env.client.CoreV1().PersistentVolumeClaims(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=data"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	pod := env.createPod(t, podOn(node, unscheduledPod(ns, "db", "data")))
	failed := claimEvents(t, env, claim, "ProvisioningFailed")
	if msg := failed[0].Message; !strings.Contains(msg, data) {
		t.Errorf("ProvisioningFailed says %q; want it to name %s", msg, data)
	}
	// The annotation was set by the scheduler, then removed by the agent.
	selected, unselected := false, false
	deadline := time.After(30 * time.Second)
	for !unselected {
		select {
		case ev := <-w.ResultChan():
			c, ok := ev.Object.(*v1.PersistentVolumeClaim)
			if !ok {
				continue
			}
			_, has := c.Annotations["volume.kubernetes.io/selected-node"]
			selected = selected || has
			unselected = selected && !has
		case <-deadline:
			t.Fatalf("selected-node never removed after the failure (set: %v)", selected)
		}
	}
	if _, err := env.client.CoreV1().PersistentVolumes().Get(ctx, "pvc-"+string(claim.UID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a PV exists although the node cannot provision: %v", err)
	}

	if out, err := exec.Command("mount", "-o", "remount,rw", data).CombinedOutput(); err != nil {
		t.Fatalf("remount rw: %v: %s", err, out)
	}
	a.waitReady(string(pod.UID), 90*time.Second)
	if got := entries(t, data); !slices.Equal(got, []string{ns + "-data-pvc-" + string(claim.UID)}) {
		t.Errorf("%s holds %v", data, got)
	}
	env.deletePodAndClaim(t, ns, pod.Name, "data")
	env.waitPVGone(t, "pvc-"+string(claim.UID))
}
