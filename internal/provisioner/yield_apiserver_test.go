package provisioner

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/volume-agent/volume-agent/test/controlplane"
)

// legacyPV is an in-tree local PV of node-a as an agent without the CSI
// driver made it for claim, with the finalizer the external-provisioner
// put on it once the driver's sidecars ran.
func legacyPV(claim *v1.PersistentVolumeClaim) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: PVName(claim), Annotations: map[string]string{AnnProvisionedBy: LocalName, AnnArchiveOnDelete: "false"},
			Finalizers: []string{FinalizerExternalProvisioner}},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimDelete,
			StorageClassName:              *claim.Spec.StorageClassName,
			PersistentVolumeSource:        v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/var/lib/volume-agent-local/" + claim.Name}},
			NodeAffinity:                  affinity("node-a"),
			ClaimRef: &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: claim.Namespace, Name: claim.Name,
				UID: claim.UID},
		},
	}
}

// boundClaim creates a claim of class and its legacy PV, and waits until
// the PV controller has bound them.
func boundClaim(t *testing.T, client kubernetes.Interface, ns, name, class string) *v1.PersistentVolume {
	t.Helper()
	ctx := t.Context()
	cl, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(class), AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := client.CoreV1().PersistentVolumes().Create(ctx, legacyPV(cl), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "PV "+pv.Name+" Bound", func() (bool, string) {
		pv, err = client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return err == nil && pv.Status.Phase == v1.VolumeBound, fmt.Sprint(pv.Status.Phase, err)
	})
	return pv
}

// TestKeptFromCSIAgainstAPIServer runs the controller with the CSI driver
// on against a real API server and kube-controller-manager (the PV
// controller binds and releases, the PV protection controller finalizes):
// an in-tree local PV of this node naming the driver, finalized by the
// external-provisioner, ends up naming the legacy name without that
// finalizer; released, it is still reclaimed after the delay and the PV
// goes (not stuck Terminating); a PV already stuck Terminating with the
// finalizer goes too; and the update is refused by the API server once the
// PV changed since it was read.
func TestKeptFromCSIAgainstAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	cp := controlplane.Start(t, controlplane.Options{ControllerManager: true})
	client := cp.Client()
	ctx := t.Context()
	ns := "keep"
	cp.CreateNamespace(t, ns)
	if _, err := client.StorageV1().StorageClasses().Create(ctx, class("local", LocalName), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	data := boundClaim(t, client, ns, "data", "local")
	stuck := boundClaim(t, client, ns, "stuck", "local")

	// The update is conditioned on the PV as it was read.
	stale := data.DeepCopy()
	touched := data.DeepCopy()
	touched.Labels = map[string]string{"touched": "yes"}
	if _, err := client.CoreV1().PersistentVolumes().Update(ctx, touched, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	update, _ := kept(stale, LegacyLocalName, true, true)
	if _, err := client.CoreV1().PersistentVolumes().Update(ctx, update, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("update of a PV changed since it was read: %v, want a conflict", err)
	}

	// Stuck: an earlier agent deleted the PV of a released claim; the
	// external-provisioner's finalizer holds it.
	if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "stuck", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "PV "+stuck.Name+" Released", func() (bool, string) {
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, stuck.Name, metav1.GetOptions{})
		return err == nil && pv.Status.Phase == v1.VolumeReleased, fmt.Sprint(pv.Status.Phase, err)
	})
	if err := client.CoreV1().PersistentVolumes().Delete(ctx, stuck.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the PV protection controller lets go of it; the external-provisioner's finalizer does not
	if pv, err := client.CoreV1().PersistentVolumes().Get(ctx, stuck.Name, metav1.GetOptions{}); err != nil || pv.DeletionTimestamp == nil {
		t.Fatalf("PV %s should be Terminating, held by the finalizer: %v", stuck.Name, err)
	}

	p := &fakeProvisioner{}
	c, err := New(Config{Client: client, Provisioner: p, Node: "node-a", Logger: zaptest.NewLogger(t), CSIDriver: LocalName, ReclaimDelay: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	eventually(t, "the bound PV kept from the external-provisioner", func() (bool, string) {
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, data.Name, metav1.GetOptions{})
		return err == nil && pv.Annotations[AnnProvisionedBy] == LegacyLocalName && !slices.Contains(pv.Finalizers, FinalizerExternalProvisioner),
			fmt.Sprint(pv.Annotations, pv.Finalizers, err)
	})
	waitPVGone(t, client, stuck.Name)

	if err := client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPVGone(t, client, data.Name)
	if _, deleted := p.calls(); !slices.Equal(deleted, []string{data.Name}) {
		t.Errorf("storage deleted for %v, want only %s", deleted, data.Name)
	}
	events, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + ReasonKeptFromCSIDriver})
	if err != nil || len(events.Items) == 0 {
		t.Errorf("%s events: %d, %v; want one per PV kept", ReasonKeptFromCSIDriver, len(events.Items), err)
	}
}

func waitPVGone(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		pv, err := client.CoreV1().PersistentVolumes().Get(t.Context(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("PV %s not deleted: phase %s, deletion %v, finalizers %v, annotations %v, err %v", name, pv.Status.Phase, pv.DeletionTimestamp,
				pv.Finalizers, pv.Annotations, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
