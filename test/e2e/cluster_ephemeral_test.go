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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/volume-agent/volume-agent/test/controlplane"
)

// ephemeralPod is a pod with the generic ephemeral volume "scratch": 1Gi of
// class, ReadWriteOnce, labelled app=name.
func ephemeralPod(ns, name, class string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []v1.Container{{Name: "main", Image: "busybox"}},
			Volumes: []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
				VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
					Spec: v1.PersistentVolumeClaimSpec{
						StorageClassName: ptr.To(class),
						AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
						Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
					},
				},
			}}}},
		},
	}
}

// TestClusterEphemeralVolumes runs an agent with the local provisioner
// beside the real scheduler and kube-controller-manager, whose ephemeral
// volume controller makes the claim of a pod's generic ephemeral volume:
// the scheduler picks the node, its agent provisions and mounts the claim,
// and the pod's deletion removes the claim (garbage collection), the PV and
// the directory. A claim of that name the pod does not own fails the
// volume with the kubelet's reason, and nothing is mounted.
func TestClusterEphemeralVolumes(t *testing.T) {
	env := startClusterWith(t, controlplane.Options{ControllerManager: true, Scheduler: true})
	ctx := context.Background()
	ns := "ephemeral"
	env.cp.CreateNamespace(t, ns)
	// The CSIDriver local.volume-agent.io (from the chart's objects) has
	// the scheduler check capacity: the agent publishes its
	// CSIStorageCapacity objects in the chart's namespace.
	a := env.startProvAgents(t, []string{"POD_NAMESPACE=volume-agent"}, "node-eph")[0]
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	_, err := env.client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: "va-ephemeral"}, Provisioner: "local.volume-agent.io",
		VolumeBindingMode: &wffc, ReclaimPolicy: ptr.To(v1.PersistentVolumeReclaimDelete), Parameters: map[string]string{"enforce": "false"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("ControllerMadeClaimIsProvisionedMountedAndCleanedUp", func(t *testing.T) {
		start := time.Now()
		pod := env.createPod(t, ephemeralPod(ns, "web", "va-ephemeral"))
		var claim *v1.PersistentVolumeClaim
		waitFor(t, 30*time.Second, "claim web-scratch made by the ephemeral volume controller", func() (bool, string) {
			c, err := env.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "web-scratch", metav1.GetOptions{})
			claim = c
			evs, _ := env.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
			return err == nil, fmt.Sprint(err, evs.Items)
		})
		p := a.waitReady(string(pod.UID), 60*time.Second)
		figure(t, "unscheduled pod to its ephemeral volume mounted", time.Since(start))
		if !metav1.IsControlledBy(claim, pod) || claim.Labels["app"] != "web" {
			t.Errorf("claim %s: owners %+v labels %v; want controlled by the pod, labelled from the template", claim.Name, claim.OwnerReferences, claim.Labels)
		}
		pvName := "pvc-" + string(claim.UID)
		dirName := ns + "-web-scratch-" + pvName
		v := p.volume("scratch")
		if v.Claim != "web-scratch" || v.PV != pvName || v.Path != filepath.Join(a.root, "pods", string(pod.UID), "volumes", "kubernetes.io~local-volume", pvName) {
			t.Fatalf("volume = %+v", v)
		}
		if err := os.WriteFile(filepath.Join(v.Path, "written"), []byte("by web"), 0o644); err != nil {
			t.Fatal(err)
		}
		checkFile(t, filepath.Join(a.data, dirName, "written"), "by web")

		start = time.Now()
		if err := env.client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		a.waitPodDirGone(string(pod.UID))
		waitFor(t, 60*time.Second, "claim web-scratch deleted by garbage collection", func() (bool, string) {
			c, err := env.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "web-scratch", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, ""
			}
			return false, fmt.Sprint(c.DeletionTimestamp, c.Finalizers, err)
		})
		env.waitPVGone(t, pvName)
		if got := entries(t, a.data); len(got) != 0 {
			t.Errorf("after the pod's deletion %s holds %v", a.data, got)
		}
		figure(t, "ephemeral volume's pod deleted to its claim, PV and directory gone", time.Since(start))
	})

	t.Run("ClaimNotOwnedByThePodIsRefused", func(t *testing.T) {
		claim := env.dynamicClaim(t, ns, "other-scratch", "va-ephemeral")
		// Bound to the node already: the scheduler would refuse to place a
		// pod whose ephemeral claim is not its own.
		spec := ephemeralPod(ns, "other", "va-ephemeral")
		spec.Spec.NodeName = a.node
		pod := env.createPod(t, spec)
		want := fmt.Sprintf("PVC %s/other-scratch was not created for pod %s/other (pod is not owner)", ns, ns)
		p := a.waitPod(ns, "other", 30*time.Second, func(p apiPod) bool { return p.volume("scratch").Error != "" })
		if v := p.volume("scratch"); v.Error != want || p.Ready {
			t.Errorf("volume %+v, ready %v; want the error %q", v, p.Ready, want)
		}
		if m := mountsUnder(t, a.resolvedRoot()); len(m) != 0 {
			t.Errorf("mounts under the root: %v; want none", m)
		}
		if got := entries(t, a.data); len(got) != 0 {
			t.Errorf("%s holds %v; the claim the pod does not own must not be provisioned", a.data, got)
		}
		waitFor(t, 30*time.Second, "FailedMount event with the reason", func() (bool, string) {
			evs := podEvents(t, env.client, pod, "FailedMount")
			for _, e := range evs {
				if strings.Contains(e.Message, want) {
					return true, ""
				}
			}
			return false, fmt.Sprint(evs)
		})
		c, err := env.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil || len(c.OwnerReferences) != 0 || c.Spec.VolumeName != "" {
			t.Errorf("claim %+v, %v; want it untouched and unbound", c, err)
		}
		env.deletePodAndClaim(t, ns, pod.Name, claim.Name)
		a.waitPodDirGone(string(pod.UID))
	})
}
