package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// testLocalReclaimDeferred, in cluster mode where the API server is
// authoritative: a claim and its pod deleted together while a process
// still works in the volume never delete the data early (the PV
// controller releases the PV at once; the agent waits for the volume's
// teardown); the storage is then moved aside for --reclaim-delay, as the
// PV's annotations and /v1/claims say; the PV's policy set to Retain
// restores it; and an agent killed while the deletion is under way (a
// deletion stuck on an immutable file) finishes it exactly once after a
// restart: the storage and the PV are gone, nothing else.
func (env *clusterEnv) testLocalReclaimDeferred(t *testing.T) {
	ctx := context.Background()
	ns := "prov-defer"
	env.cp.CreateNamespace(t, ns)
	node := "node-prov-defer"
	env.schedulableNode(t, node)
	a := &provAgent{agent: newAgent(t), node: node, data: filepath.Join(t.TempDir(), "local")}
	a.start("--kubeconfig", env.nodeKubeconfig(t, node), "--node-name", node, "--provisioners", "local", "--local-path-root", a.data,
		"--reclaim-delay", "1h")
	env.localClass(t, "va-local-defer", v1.PersistentVolumeReclaimDelete, nil)
	claim := env.dynamicClaim(t, ns, "data", "va-local-defer")
	pod := env.createPod(t, podOn(node, unscheduledPod(ns, "db", "data")))
	v := a.waitReady(string(pod.UID), 60*time.Second).volume("store")
	pvName := "pvc-" + string(claim.UID)
	dir := filepath.Join(a.data, ns+"-data-"+pvName)
	aside := filepath.Join(a.data, ".pending-delete-"+pvName)
	if err := os.WriteFile(filepath.Join(v.Path, "written"), []byte("by db"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Busy: the pod and the claim deleted together while a process works
	// in the volume. The teardown fails (EBUSY); the data stays.
	worker := exec.Command("sleep", "600")
	worker.Dir = v.Path
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	stopWorker := func() { _ = worker.Process.Kill(); _ = worker.Wait() }
	t.Cleanup(stopWorker)
	env.deletePodAndClaim(t, ns, pod.Name, "data")
	waitFor(t, 30*time.Second, "the PV Released", func() (bool, string) {
		pv, err := env.client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		return err == nil && pv.Status.Phase == v1.VolumeReleased, fmt.Sprint(pv.Status.Phase, err)
	})
	time.Sleep(4 * time.Second)
	checkFile(t, filepath.Join(dir, "written"), "by db")
	if pv, err := env.client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{}); err != nil || pv.Annotations["volume-agent.io/reclaim-step"] != "" {
		t.Fatalf("PV while a pod still has the volume: %v, %v; want no reclaim step", pv.Annotations, err)
	}

	// Torn down: moved aside, recorded, shown; not deleted.
	stopWorker()
	waitFor(t, 60*time.Second, "the storage moved aside", func() (bool, string) {
		pv, err := env.client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		_, serr := os.Stat(filepath.Join(aside, "written"))
		return err == nil && pv.Annotations["volume-agent.io/reclaim-step"] == "Aside" && serr == nil, fmt.Sprint(pv.Annotations, err, serr)
	})
	if c := claimOf(a.claims(), "data"); c.PV != pvName || c.PendingDeletion == nil || c.PendingDeletion.Step != "Aside" ||
		c.PendingDeletion.DeleteAfter == nil || time.Until(*c.PendingDeletion.DeleteAfter) < 59*time.Minute {
		t.Errorf("/v1/claims = %+v; want data's PV Aside, deleted in an hour", a.claims())
	}

	// Restored: the operator sets the policy to Retain.
	env.patchPV(t, pvName, `{"spec": {"persistentVolumeReclaimPolicy": "Retain"}}`)
	waitFor(t, 30*time.Second, "the storage restored", func() (bool, string) {
		pv, err := env.client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		_, serr := os.Stat(filepath.Join(dir, "written"))
		return err == nil && pv.Annotations["volume-agent.io/reclaim-step"] == "" && serr == nil, fmt.Sprint(pv.Annotations, err, serr)
	})

	// Deleted after all, killed half way, finished after a restart. The
	// operator lets it go at once by giving a delete-after in the past.
	stuck := filepath.Join(dir, "stuck")
	if err := os.WriteFile(stuck, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chattr", "+i", stuck).CombinedOutput(); err != nil {
		t.Skipf("chattr +i: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", filepath.Join(aside, "stuck")).Run() })
	env.patchPV(t, pvName, `{"spec": {"persistentVolumeReclaimPolicy": "Delete"}}`)
	waitFor(t, 30*time.Second, "moved aside again", func() (bool, string) {
		pv, err := env.client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		return err == nil && pv.Annotations["volume-agent.io/reclaim-step"] == "Aside", fmt.Sprint(pv.Annotations, err)
	})
	env.patchPV(t, pvName, fmt.Sprintf(`{"metadata": {"annotations": {"volume-agent.io/delete-after": %q}}}`,
		time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)))
	waitFor(t, 60*time.Second, "the deletion under way and stuck", func() (bool, string) {
		pv, err := env.client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		_, serr := os.Stat(filepath.Join(aside, "written"))
		return err == nil && pv.Annotations["volume-agent.io/reclaim-step"] == "Deleting" && os.IsNotExist(serr), fmt.Sprint(pv.Annotations, err, serr)
	})
	a.kill()
	if out, err := exec.Command("chattr", "-i", filepath.Join(aside, "stuck")).CombinedOutput(); err != nil {
		t.Fatalf("chattr -i: %v: %s", err, out)
	}
	a.start(a.extra...)
	env.waitPVGone(t, pvName)
	if got := entries(t, a.data); len(got) != 0 {
		t.Errorf("%s holds %v after the deletion, want nothing", a.data, got)
	}
	if n := strings.Count(a.logs.String(), `"msg":"released volume deleted"`); n != 1 {
		t.Errorf("the restarted agent logged %d deletions, want 1", n)
	}
}

// patchPV applies a merge patch to a PV.
func (env *clusterEnv) patchPV(t *testing.T, name, patch string) {
	t.Helper()
	_, err := env.client.CoreV1().PersistentVolumes().Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("patch PV %s: %v", name, err)
	}
}
