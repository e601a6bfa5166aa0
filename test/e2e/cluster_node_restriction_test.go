package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// testRecordedStepRefused: the annotation volume-agent.io/reclaim-step:
// Deleting, written by anyone who may update PVs on a PV of the agent's
// local provisioner that is Bound to a live claim whose pod is gone (a
// StatefulSet scaled down), is refused, with policy Delete and with
// Retain: the data and the PVs stay, each PV says why
// (volume-agent.io/reclaim-refused) and gets a VolumeReclaimRefused event,
// and the agent logs it once. The Retain PV, once its claim is deleted
// (Released), is still refused. The Delete PV, once its claim is deleted,
// is deleted: the live state permits it, and the node's agent may, under
// the chart's admission policies, with a token that names its node.
func (env *clusterEnv) testRecordedStepRefused(t *testing.T) {
	ctx := context.Background()
	const ns, node = "recorded-step", "node-recorded-step"
	env.cp.CreateNamespace(t, ns)
	env.schedulableNode(t, node)
	a := &provAgent{agent: newAgent(t), node: node, data: filepath.Join(t.TempDir(), "local")}
	a.start("--kubeconfig", env.nodeKubeconfig(t, node), "--node-name", node, "--provisioners", "local",
		"--local-path-root", a.data, "--reclaim-delay", "0s")
	pvs := map[v1.PersistentVolumeReclaimPolicy]string{}
	for _, policy := range []v1.PersistentVolumeReclaimPolicy{v1.PersistentVolumeReclaimDelete, v1.PersistentVolumeReclaimRetain} {
		name := "data-" + strings.ToLower(string(policy))
		class := "va-recorded-" + strings.ToLower(string(policy))
		env.localClass(t, class, policy, nil)
		claim := env.dynamicClaim(t, ns, name, class)
		pod := env.createPod(t, podOn(node, unscheduledPod(ns, "db-"+strings.ToLower(string(policy)), name)))
		v := a.waitReady(string(pod.UID), 60*time.Second).volume("store")
		writeFile(t, filepath.Join(v.Path, "written"), "by db")
		pvs[policy] = "pvc-" + string(claim.UID)
		// The StatefulSet scaled down: the pod goes, the claim stays.
		if err := env.client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		a.waitPodDirGone(string(pod.UID))
	}
	for _, pv := range pvs {
		env.patchPV(t, pv, `{"metadata": {"annotations": {"volume-agent.io/reclaim-step": "Deleting"}}}`)
	}
	for policy, pv := range pvs {
		env.waitStepRefused(t, pv, "is not Released")
		checkFile(t, filepath.Join(a.data, ns+"-data-"+strings.ToLower(string(policy))+"-"+pv, "written"), "by db")
		if n := len(a.logLines(t, "recorded reclaim step refused", map[string]string{"pv": pv, "step": "Deleting"})); n != 1 {
			t.Errorf("the agent logged %d refusals for %s, want 1", n, pv)
		}
	}

	// The Retain PV Released: its policy still refuses the deletion.
	retained := pvs[v1.PersistentVolumeReclaimRetain]
	env.deletePodAndClaim(t, ns, "", "data-retain")
	env.waitStepRefused(t, retained, "its deletion was recorded, but the volume has a reclaim policy other than Delete")
	checkFile(t, filepath.Join(a.data, ns+"-data-retain-"+retained, "written"), "by db")

	// The Delete PV Released: deleted, by the node's own agent.
	deleted := pvs[v1.PersistentVolumeReclaimDelete]
	env.deletePodAndClaim(t, ns, "", "data-delete")
	env.waitPVGone(t, deleted)
	if got := entries(t, a.data); len(got) != 1 || got[0] != ns+"-data-retain-"+retained {
		t.Errorf("%s holds %v, want only the Retain PV's directory", a.data, got)
	}
	if _, err := env.client.CoreV1().PersistentVolumes().Get(ctx, retained, metav1.GetOptions{}); err != nil {
		t.Errorf("the Retain PV: %v", err)
	}
}

// waitStepRefused waits until the PV says why its recorded reclaim step is
// refused, with a reason containing why, and has a VolumeReclaimRefused
// event saying so.
func (env *clusterEnv) waitStepRefused(t *testing.T, name, why string) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, 30*time.Second, "the reclaim step of "+name+" refused: "+why, func() (bool, string) {
		pv, err := env.client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		events, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + name + ",reason=VolumeReclaimRefused",
		})
		if err != nil {
			return false, err.Error()
		}
		said := false
		for _, e := range events.Items {
			said = said || (e.Type == v1.EventTypeWarning && strings.Contains(e.Message, why))
		}
		return strings.Contains(pv.Annotations["volume-agent.io/reclaim-refused"], why) && said,
			fmt.Sprintf("annotations %v, %d events", pv.Annotations, len(events.Items))
	})
}

// testNodeRestrictionPolicy: with the chart's admission policies (its
// rendering with provisioners, which deploy/chart's tests hold equal to
// deploy/provisioners.yaml) and RBAC installed, a token of the agent's
// ServiceAccount bound to a pod on node A (TokenRequest with a
// boundObjectRef to the pod, so that the API server puts the node's name
// in its user info) may create, update and delete the PVs whose node
// affinity names A, and update the claims whose selected-node is A (only
// to remove that annotation) and their status; for node B's, each write
// is refused with 403. Of an nfs-subdir PV, which names no node, it may
// change only the reclaim annotations (not its claimRef, nor
// archive-on-delete), and delete it only while it is not Bound. A token bound to no pod may write
// no PV at all.
func (env *clusterEnv) testNodeRestrictionPolicy(t *testing.T) {
	ctx := context.Background()
	const nodeA, nodeB = "node-policy-a", "node-policy-b"
	env.cp.CreateNamespace(t, "policy")
	for _, n := range []string{nodeA, nodeB} {
		if _, err := env.client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	agentA := env.podBoundClient(t, nodeA)
	unbound := clientFor(t, env.agentKubeconfig)
	admin := env.client.CoreV1()
	for _, pv := range []*v1.PersistentVolume{policyPV("policy-pv-a", nodeA), policyPV("policy-pv-b", nodeB), nfsSubdirPV("policy-pv-nfs")} {
		if _, err := admin.PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*v1.PersistentVolumeClaim{policyClaim("claim-a", nodeA), policyClaim("claim-b", nodeB)} {
		if _, err := admin.PersistentVolumeClaims("policy").Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pvs := agentA.CoreV1().PersistentVolumes()
	// A policy is in force once the API server has loaded it: until then
	// this harmless write goes through.
	waitFor(t, 30*time.Second, "the admission policies in force", func() (bool, string) {
		err := annotatePV(ctx, agentA, "policy-pv-b", "policy-test", "probe")
		return refusedByPolicy(err), fmt.Sprint(err)
	})

	forbidden := map[string]error{
		"update node B's PV": annotatePV(ctx, agentA, "policy-pv-b", "volume-agent.io/reclaim-step", "Deleting"),
		"delete node B's PV": pvs.Delete(ctx, "policy-pv-b", metav1.DeleteOptions{}),
		"create a PV of node B": func() error {
			_, err := pvs.Create(ctx, policyPV("policy-pv-b2", nodeB), metav1.CreateOptions{})
			return err
		}(),
		"point an nfs-subdir PV at a claim": updatePV(ctx, agentA, "policy-pv-nfs", func(pv *v1.PersistentVolume) {
			pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "policy", Name: "claim-b"}
		}),
		"change archive-on-delete of an nfs-subdir PV":    annotatePV(ctx, agentA, "policy-pv-nfs", "volume-agent.io/archive-on-delete", "false"),
		"remove selected-node from node B's claim":        unselect(ctx, agentA, "claim-b"),
		"update the status of node B's claim":             resizing(ctx, agentA, "claim-b"),
		"annotate node A's claim":                         annotateClaim(ctx, agentA, "claim-a"),
		"update node A's PV with a token bound to no pod": annotatePV(ctx, unbound, "policy-pv-a", "volume-agent.io/reclaim-step", "Deleting"),
	}
	for what, err := range forbidden {
		if !refusedByPolicy(err) {
			t.Errorf("%s: %v, want 403 Forbidden from a ValidatingAdmissionPolicy", what, err)
		}
	}
	for what, err := range map[string]error{
		"update node A's PV": annotatePV(ctx, agentA, "policy-pv-a", "volume-agent.io/reclaim-step", "Aside"),
		"create a PV of node A": func() error {
			_, err := pvs.Create(ctx, policyPV("policy-pv-a2", nodeA), metav1.CreateOptions{})
			return err
		}(),
		"delete node A's PV":                          pvs.Delete(ctx, "policy-pv-a2", metav1.DeleteOptions{}),
		"record a reclaim step on an nfs-subdir PV":   annotatePV(ctx, agentA, "policy-pv-nfs", "volume-agent.io/reclaim-step", "Aside"),
		"update the status of node A's claim":         resizing(ctx, agentA, "claim-a"),
		"remove selected-node from node A's claim":    unselect(ctx, agentA, "claim-a"),
		"delete an nfs-subdir PV that is not Bound":   pvs.Delete(ctx, "policy-pv-nfs", metav1.DeleteOptions{}),
		"delete node A's other PV, as an agent would": pvs.Delete(ctx, "policy-pv-a", metav1.DeleteOptions{}),
	} {
		if err != nil {
			t.Errorf("%s: %v, want it allowed", what, err)
		}
	}
	if _, err := admin.PersistentVolumes().Get(ctx, "policy-pv-b", metav1.GetOptions{}); err != nil {
		t.Errorf("node B's PV: %v", err)
	}
	env.checkPolicyTypes(t)
}

// checkPolicyTypes waits until kube-controller-manager has type-checked
// the installed admission policies against the schemas of the objects
// they match, and fails on any warning it gives.
func (env *clusterEnv) checkPolicyTypes(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, name := range []string{"volume-agent-node-persistentvolumes", "volume-agent-node-claims"} {
		waitFor(t, 60*time.Second, "policy "+name+" type-checked", func() (bool, string) {
			p, err := env.client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if p.Status.ObservedGeneration != p.Generation || p.Status.TypeChecking == nil {
				return false, fmt.Sprintf("status %+v", p.Status)
			}
			for _, w := range p.Status.TypeChecking.ExpressionWarnings {
				t.Errorf("policy %s: %s: %s", name, w.FieldRef, w.Warning)
			}
			return true, ""
		})
	}
}

// podBoundClient returns a client with a token of the agent's
// ServiceAccount bound to a pod of that ServiceAccount on node, as the
// kubelet mounts it into an agent's pod.
func (env *clusterEnv) podBoundClient(t *testing.T, node string) kubernetes.Interface {
	t.Helper()
	pod, err := env.client.CoreV1().Pods("volume-agent").Create(context.Background(), &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "token-holder-" + node},
		Spec: v1.PodSpec{
			NodeName:                     node,
			ServiceAccountName:           "volume-agent",
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []v1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := boundToken(t, env.client, &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
	return clientFor(t, env.cp.KubeconfigForToken(t, token))
}

func clientFor(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// policyPV is a PV as the local provisioner makes it on node.
func policyPV(name, node string) *v1.PersistentVolume {
	pv := localPVFor(name, node, "/var/lib/volume-agent-local/"+name)
	pv.Annotations = map[string]string{"pv.kubernetes.io/provisioned-by": "local.volume-agent.io"}
	pv.Spec.StorageClassName = "policy-pvs"
	return pv
}

// nfsSubdirPV is a PV as the nfs-subdir provisioner makes it.
func nfsSubdirPV(name string) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
			"pv.kubernetes.io/provisioned-by": "volume-agent.io/nfs-subdir", "volume-agent.io/archive-on-delete": "true",
		}},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimDelete,
			StorageClassName:              "policy-pvs",
			PersistentVolumeSource:        v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "192.0.2.1", Path: "/" + name}},
		},
	}
}

// policyClaim is a claim scheduled to node, of a class that does not
// exist: nothing provisions or binds it.
func policyClaim(name, node string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "policy", Name: name,
			Annotations: map[string]string{"volume.kubernetes.io/selected-node": node}},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To("policy-claims"),
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

// refusedByPolicy reports whether err is a 403 from a
// ValidatingAdmissionPolicy (not from RBAC).
func refusedByPolicy(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy")
}

// updatePV changes a PV through c as the agent does: a read, then an
// Update.
func updatePV(ctx context.Context, c kubernetes.Interface, name string, change func(*v1.PersistentVolume)) error {
	pv, err := c.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	change(pv)
	_, err = c.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
	return err
}

func annotatePV(ctx context.Context, c kubernetes.Interface, name, key, value string) error {
	return updatePV(ctx, c, name, func(pv *v1.PersistentVolume) { metav1.SetMetaDataAnnotation(&pv.ObjectMeta, key, value) })
}

// updateClaim changes a claim of the namespace policy through c as the
// agent does (its status when status is set).
func updateClaim(ctx context.Context, c kubernetes.Interface, name string, status bool, change func(*v1.PersistentVolumeClaim)) error {
	claims := c.CoreV1().PersistentVolumeClaims("policy")
	claim, err := claims.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	change(claim)
	if status {
		_, err = claims.UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	} else {
		_, err = claims.Update(ctx, claim, metav1.UpdateOptions{})
	}
	return err
}

// unselect removes selected-node from the claim, as the local provisioner
// does when its node cannot provision.
func unselect(ctx context.Context, c kubernetes.Interface, name string) error {
	return updateClaim(ctx, c, name, false, func(claim *v1.PersistentVolumeClaim) {
		delete(claim.Annotations, "volume.kubernetes.io/selected-node")
	})
}

// resizing sets the claim's condition Resizing, as the local provisioner
// does when it grows a volume.
func resizing(ctx context.Context, c kubernetes.Interface, name string) error {
	return updateClaim(ctx, c, name, true, func(claim *v1.PersistentVolumeClaim) {
		claim.Status.Conditions = append(claim.Status.Conditions, v1.PersistentVolumeClaimCondition{
			Type: v1.PersistentVolumeClaimResizing, Status: v1.ConditionTrue, LastTransitionTime: metav1.Now(),
		})
	})
}

// annotateClaim makes a change to the claim that no provisioner makes.
func annotateClaim(ctx context.Context, c kubernetes.Interface, name string) error {
	return updateClaim(ctx, c, name, false, func(claim *v1.PersistentVolumeClaim) {
		metav1.SetMetaDataAnnotation(&claim.ObjectMeta, "changed-by", "an-agent")
	})
}
