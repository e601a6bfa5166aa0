package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// settle bounds how long the agent may take to act on what a watch
// reports: well under the populator's resync (about a minute), which is
// all that acted on an empty or refused first list before.
const settle = 15 * time.Second

// TestClusterWatchesAndReachability: what a per-object watch finds (nothing,
// or a refusal) reaches the volume at once, and /readyz judges the API
// server from the pod and Node watches, not from single requests. One
// control plane; the hung API server comes last.
func TestClusterWatchesAndReachability(t *testing.T) {
	env := startCluster(t)
	t.Run("MissingConfigMapFailsAtOnce", env.testMissingConfigMapFailsAtOnce)
	t.Run("OptionalMissingConfigMapMountsAtOnce", env.testOptionalMissingConfigMap)
	t.Run("ForbiddenSecretFailsAtOnce", env.testForbiddenSecret)
	t.Run("ForbiddenNodeWatchInReadyz", env.testForbiddenNodeWatch)
	t.Run("RejectedEventsKeepReady", env.testRejectedEventsKeepReady)
	t.Run("HungAPIServer", env.testHungAPIServer) // last: it pauses the server
}

// subtestNamespace creates a namespace named after the subtest.
func (env *clusterEnv) subtestNamespace(t *testing.T) string {
	_, sub, _ := strings.Cut(t.Name(), "/")
	name := strings.Trim(regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(sub), "-"), "-")
	if len(name) > 50 {
		name = name[:50]
	}
	env.cp.CreateNamespace(t, name)
	return name
}

// onlyVolumes is a pod bound to node with exactly vols: no service account
// token is mounted, so no kube-api-access volume and its kube-root-ca.crt
// watch can wake the agent for another reason.
func onlyVolumes(ns, node string, vols ...v1.Volume) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []v1.Container{{Name: "main", Image: "busybox"}},
			Volumes:                      vols,
		},
	}
}

func configMapVolume(name string, optional bool) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: name}, Optional: ptr.To(optional)}}}
}

// manyVolumes is how many objects a pod refers to, each through its own
// volume, so that their watches start together. Whether a watch has listed
// before the agent first looks its object up is a race; with this many,
// some watches lose it on every run.
const manyVolumes = 20

// startSettledAgent starts an agent for node and waits until /readyz is
// 200 and a moment more, so that the notifications of its start-up are
// over: a lookup the test's pod makes wait can only be woken by what its
// own watch reports.
func (env *clusterEnv) startSettledAgent(t *testing.T, node, kubeconfig string) *agent {
	t.Helper()
	a := env.startAgentWith(t, node, kubeconfig)
	waitFor(t, settle, "/readyz ok", func() (bool, string) {
		code, body := a.get("/readyz")
		return code == 200, body
	})
	time.Sleep(300 * time.Millisecond)
	return a
}

// volumes returns manyVolumes volumes made by mk from the names prefix-0…
func volumes(prefix string, mk func(name string) v1.Volume) []v1.Volume {
	var out []v1.Volume
	for i := range manyVolumes {
		out = append(out, mk(fmt.Sprintf("%s-%d", prefix, i)))
	}
	return out
}

// waitVolumes waits up to settle until every volume of the pod satisfies cond.
func (a *agent) waitVolumes(pod *v1.Pod, cond func(apiVolume) bool) {
	a.t.Helper()
	a.waitPod(pod.Namespace, pod.Name, settle, func(p apiPod) bool {
		for _, v := range pod.Spec.Volumes {
			if !cond(p.volume(v.Name)) {
				return false
			}
		}
		return true
	})
}

// waitVolume waits up to settle until the pod's volume satisfies cond.
func (a *agent) waitVolume(pod *v1.Pod, volume string, cond func(apiVolume) bool) {
	a.t.Helper()
	a.waitPod(pod.Namespace, pod.Name, settle, func(p apiPod) bool { return cond(p.volume(volume)) })
}

func (env *clusterEnv) testMissingConfigMapFailsAtOnce(t *testing.T) {
	ns := env.subtestNamespace(t)
	node := "node-" + ns
	a := env.startSettledAgent(t, node, env.agentKubeconfig)
	start := time.Now()
	pod := env.createPod(t, onlyVolumes(ns, node, volumes("missing", func(name string) v1.Volume { return configMapVolume(name, false) })...))
	a.waitVolumes(pod, func(v apiVolume) bool { return v.State == "Failed" && strings.Contains(v.Error, "not found") })
	figure(t, fmt.Sprintf("pod created to its %d volumes Failed on missing configMaps", manyVolumes), time.Since(start))
	waitFor(t, settle, "a FailedMount event", func() (bool, string) {
		n := len(podEvents(t, env.client, pod, "FailedMount"))
		return n > 0, fmt.Sprintf("%d events", n)
	})
}

func (env *clusterEnv) testOptionalMissingConfigMap(t *testing.T) {
	ns := env.subtestNamespace(t)
	node := "node-" + ns
	a := env.startSettledAgent(t, node, env.agentKubeconfig)
	start := time.Now()
	pod := env.createPod(t, onlyVolumes(ns, node, volumes("missing", func(name string) v1.Volume { return configMapVolume(name, true) })...))
	p := a.waitReady(string(pod.UID), settle)
	figure(t, fmt.Sprintf("pod created to ready with %d optional missing configMaps", manyVolumes), time.Since(start))
	if v := p.volume("missing-0"); v.State != "Mounted" || v.Path == "" {
		t.Errorf("optional missing configMap volume = %+v, want Mounted", v)
	}
}

func (env *clusterEnv) testForbiddenSecret(t *testing.T) {
	ns := env.subtestNamespace(t)
	node := "node-" + ns
	a := env.startSettledAgent(t, node, env.kubeconfigWithout(t, "no-secrets", "secrets"))
	vols := volumes("creds", func(name string) v1.Volume {
		env.create(t, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"k": []byte("v")}})
		return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: name}}}
	})
	start := time.Now()
	pod := env.createPod(t, onlyVolumes(ns, node, vols...))
	a.waitVolumes(pod, func(v apiVolume) bool { return v.State == "Failed" && strings.Contains(v.Error, "forbidden") })
	figure(t, fmt.Sprintf("pod created to its %d volumes Failed on secrets the agent may not read", manyVolumes), time.Since(start))
}

// startAgentWith registers node and runs an agent for it that
// authenticates with kubeconfig.
func (env *clusterEnv) startAgentWith(t *testing.T, node, kubeconfig string) *agent {
	t.Helper()
	if _, err := env.client.CoreV1().Nodes().Create(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := newAgent(t)
	a.start("--kubeconfig", kubeconfig, "--node-name", node)
	return a
}

// kubeconfigWithout returns a kubeconfig for a new ServiceAccount name,
// bound to the agent's ClusterRole (deploy/serviceaccount-mode.yaml's)
// less every permission on resource.
func (env *clusterEnv) kubeconfigWithout(t *testing.T, name, resource string) string {
	t.Helper()
	return env.kubeconfigWithRole(t, name, func(r rbacv1.PolicyRule) rbacv1.PolicyRule {
		r.Resources = removed(r.Resources, resource)
		return r
	})
}

// kubeconfigWithRole returns a kubeconfig for a new ServiceAccount name,
// bound to the agent's ClusterRole of the chart's service-account mode
// (volume-agent, not the provisioners'; deploy/serviceaccount-mode.yaml's) with each
// rule passed through edit; a rule left without resources or verbs is
// dropped.
func (env *clusterEnv) kubeconfigWithRole(t *testing.T, name string, edit func(rbacv1.PolicyRule) rbacv1.PolicyRule) string {
	t.Helper()
	ctx := context.Background()
	var role rbacv1.ClusterRole
	for _, o := range installObjects(t, serviceAccountMode) {
		if o.GetKind() == "ClusterRole" && o.GetName() == "volume-agent" {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
				t.Fatal(err)
			}
		}
	}
	role.ObjectMeta = metav1.ObjectMeta{Name: name}
	var rules []rbacv1.PolicyRule
	for _, r := range role.Rules {
		if r = edit(r); len(r.Resources) > 0 && len(r.Verbs) > 0 {
			rules = append(rules, r)
		}
	}
	role.Rules = rules
	rbac := env.client.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "volume-agent", Name: name}},
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "volume-agent", Name: name}}
	if _, err := env.client.CoreV1().ServiceAccounts("volume-agent").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return env.cp.KubeconfigForToken(t, serviceAccountToken(t, env.client, "volume-agent", name))
}

func removed(list []string, drop string) []string {
	var out []string
	for _, s := range list {
		if s != drop {
			out = append(out, s)
		}
	}
	return out
}
