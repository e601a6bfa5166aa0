package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/test/controlplane"
)

// externalProvisionerFinalizer is the finalizer the CSI external-provisioner
// puts on the PVs that name its driver, CSI or not.
const externalProvisionerFinalizer = "external-provisioner.volume.kubernetes.io/finalizer"

// TestClusterKeepFromCSIPolicy: the write with which an agent serving the
// CSI driver keeps its in-tree local PVs from the external-provisioner (one
// update: pv.kubernetes.io/provisioned-by set to the legacy name
// volume-agent.io/local, the external-provisioner's finalizer removed) is
// one the chart's RBAC and admission policies let the agent of the PV's
// node make, on a Bound PV and on one already Terminating (which then
// goes), and refuse the agent of another node. The controller's own
// behaviour against a real API server is internal/provisioner's
// TestKeptFromCSIAgainstAPIServer.
func TestClusterKeepFromCSIPolicy(t *testing.T) {
	// The controller manager's PV protection controller lets go of a PV
	// that is not Bound; the external-provisioner's finalizer is then all
	// that holds the Terminating one.
	env := startClusterWith(t, controlplane.Options{ControllerManager: true})
	ctx := t.Context()
	const nodeA, nodeB = "node-keep-a", "node-keep-b"
	for _, n := range []string{nodeA, nodeB} {
		if _, err := env.client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	admin := env.client.CoreV1().PersistentVolumes()
	for name, node := range map[string]string{"keep-a": nodeA, "keep-a-terminating": nodeA, "keep-b": nodeB} {
		pv := policyPV(name, node)
		pv.Finalizers = []string{externalProvisionerFinalizer}
		if _, err := admin.Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.Delete(ctx, "keep-a-terminating", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	agentA := env.podBoundClient(t, nodeA)
	waitFor(t, 30*time.Second, "the admission policies in force", func() (bool, string) {
		err := annotatePV(ctx, agentA, "keep-b", "policy-test", "probe")
		return refusedByPolicy(err), fmt.Sprint(err)
	})
	keep := func(pv *v1.PersistentVolume) {
		pv.Annotations["pv.kubernetes.io/provisioned-by"] = "volume-agent.io/local"
		pv.Finalizers = slices.DeleteFunc(pv.Finalizers, func(f string) bool { return f == externalProvisionerFinalizer })
	}
	if err := updatePV(ctx, agentA, "keep-b", keep); !refusedByPolicy(err) {
		t.Errorf("node A's agent keeping node B's PV: %v, want 403 Forbidden from a ValidatingAdmissionPolicy", err)
	}
	if err := updatePV(ctx, agentA, "keep-a", keep); err != nil {
		t.Fatalf("node A's agent keeping its Bound PV: %v, want it allowed", err)
	}
	pv, err := admin.Get(ctx, "keep-a", metav1.GetOptions{})
	if err != nil || pv.Annotations["pv.kubernetes.io/provisioned-by"] != "volume-agent.io/local" || slices.Contains(pv.Finalizers, externalProvisionerFinalizer) {
		t.Errorf("keep-a after the update: %v %v %v", pv.Annotations, pv.Finalizers, err)
	}
	if pv, err := admin.Get(ctx, "keep-a-terminating", metav1.GetOptions{}); err != nil || pv.DeletionTimestamp == nil {
		t.Fatalf("keep-a-terminating before the update: %v; want it Terminating, held by the finalizer", err)
	}
	if err := updatePV(ctx, agentA, "keep-a-terminating", keep); err != nil {
		t.Fatalf("node A's agent keeping its Terminating PV: %v, want it allowed", err)
	}
	waitFor(t, 30*time.Second, "the Terminating PV gone", func() (bool, string) {
		_, err := admin.Get(ctx, "keep-a-terminating", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if pv, err := admin.Get(ctx, "keep-b", metav1.GetOptions{}); err != nil || !slices.Contains(pv.Finalizers, externalProvisionerFinalizer) ||
		pv.Annotations["pv.kubernetes.io/provisioned-by"] != "local.volume-agent.io" {
		t.Errorf("node B's PV changed: %v %v %v", pv.Annotations, pv.Finalizers, err)
	}
}
