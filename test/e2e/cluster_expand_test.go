package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// testLocalEnforcedExpand, in cluster mode on a btrfs root: a claim of a
// class with allowVolumeExpansion, its request patched through the API
// server, is expanded by the agent of its node: the volume takes what did
// not fit before, the PV's spec.capacity and the claim's status.capacity
// and allocatedResources say the new size, and no Resizing condition is
// left.
func (env *clusterEnv) testLocalEnforcedExpand(t *testing.T) {
	ctx := context.Background()
	ns := "prov-expand"
	env.cp.CreateNamespace(t, ns)
	node := "node-prov-expand"
	env.schedulableNode(t, node)
	a := &provAgent{data: btrfsLocalRoot(t, true), node: node}
	a.agent = newAgent(t)
	a.start("--kubeconfig", env.nodeKubeconfig(t, node), "--node-name", node, "--provisioners", "local", "--local-path-root", a.data, "--reclaim-delay", "0s")
	wffc, del := storagev1.VolumeBindingWaitForFirstConsumer, v1.PersistentVolumeReclaimDelete
	if _, err := env.client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: "va-local-grow"}, Provisioner: "volume-agent.io/local",
		VolumeBindingMode: &wffc, ReclaimPolicy: &del, AllowVolumeExpansion: ptr.To(true),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claim, err := env.client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data"},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To("va-local-grow"),
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("100Mi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := env.createPod(t, podOn(node, unscheduledPod(ns, "writer", "data")))
	v := a.waitReady(string(pod.UID), 60*time.Second).volume("store")
	big := filepath.Join(v.Path, "big")
	if n, err := fill(big, 150<<20); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("writing 150 MiB into a 100Mi volume: %d bytes, then %v; want EDQUOT", n, err)
	}
	if err := os.Remove(big); err != nil {
		t.Fatal(err)
	}

	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := env.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("200Mi")
		_, err = env.client.CoreV1().PersistentVolumeClaims(ns).Update(ctx, c, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	pvName := "pvc-" + string(claim.UID)
	waitFor(t, 60*time.Second, "the PV and the claim at 200Mi", func() (bool, string) {
		pv, err := env.client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c, err := env.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ok := pv.Spec.Capacity.Storage().String() == "200Mi" && c.Status.Capacity.Storage().String() == "200Mi" &&
			c.Status.AllocatedResources.Storage().String() == "200Mi" && len(c.Status.Conditions) == 0
		return ok, fmt.Sprintf("PV capacity %s, claim status %+v", pv.Spec.Capacity.Storage(), c.Status)
	})
	if n, err := fill(big, 150<<20); err != nil {
		t.Fatalf("150 MiB into the volume expanded to 200Mi: %d bytes, %v", n, err)
	}
	// Set up once: "since" is no witness, a read made before the status
	// server's recorder has seen a new state shows it as new at that read.
	after := a.waitReady(string(pod.UID), 10*time.Second).volume("store")
	if n := len(a.logLines(t, "volume set up", map[string]string{"podUID": string(pod.UID), "volume": "store"})); after.Path != v.Path || after.State != v.State || n != 1 {
		t.Errorf("the pod's volume changed with the expansion: %+v, was %+v; set up %d times", after, v, n)
	}
	env.deletePodAndClaim(t, ns, pod.Name, "data")
	env.waitPVGone(t, pvName)
}
