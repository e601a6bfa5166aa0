package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Sizes of TestClusterNewPodLatency: pods created one at a time, and at once.
const (
	latencySingles = 10
	latencyBurst   = 50
)

// TestClusterNewPodLatency: a new API pod with a configMap, a secret, an
// emptyDir and a hostPath volume gets its files and becomes ready, one pod
// at a time and in a burst, with the RBAC of deploy/serviceaccount-mode.yaml (get,
// list and watch on ConfigMaps and Secrets: the direct read answers first)
// and with get taken away, as in a role deployed before the agent read
// directly (the direct read of a new object is refused and its lookups
// wait for the object's watch). It logs FIGUREs (create → the configMap's
// and the secret's files on disk → pod ready, p50 and p99) and asserts only
// outcomes, never times.
func TestClusterNewPodLatency(t *testing.T) {
	env := startCluster(t)
	for _, get := range []bool{false, true} {
		t.Run(fmt.Sprintf("get=%v", get), func(t *testing.T) {
			ns := env.subtestNamespace(t)
			node := "node-" + ns
			a := env.startSettledAgent(t, node, env.latencyKubeconfig(t, ns, get))
			run := &latencyRun{env: env, a: a, ns: ns, node: node, host: t.TempDir()}
			var singles []podLatency
			for i := range latencySingles {
				time.Sleep(150 * time.Millisecond) // apart: each waits alone
				singles = append(singles, run.pods(t, fmt.Sprint("single-", i), 1)...)
			}
			report(t, "one pod at a time", singles)
			report(t, fmt.Sprintf("%d pods at once", latencyBurst), run.pods(t, "burst", latencyBurst))
			// Without get the direct reads are refused, said once per
			// resource, and the pods above waited for their watches.
			refused := a.logLines(t, "cannot get objects directly; new pods wait for their watches (grant get on them to the agent)", nil)
			if want := map[bool]int{false: 2, true: 0}[get]; len(refused) != want {
				t.Errorf("agent logged %d refused direct reads, want %d (one per resource without get)", len(refused), want)
			}
		})
	}
}

// latencyKubeconfig is the agent's ServiceAccount with the ClusterRole of
// deploy/serviceaccount-mode.yaml, less get on ConfigMaps and Secrets without get.
func (env *clusterEnv) latencyKubeconfig(t *testing.T, name string, get bool) string {
	t.Helper()
	return env.kubeconfigWithRole(t, name, func(r rbacv1.PolicyRule) rbacv1.PolicyRule {
		if !get && slices.Contains(r.Resources, "configmaps") {
			r.Verbs = removed(r.Verbs, "get")
		}
		return r
	})
}

// latencyRun creates pods for one agent.
type latencyRun struct {
	env      *clusterEnv
	a        *agent
	ns, node string
	host     string // the hostPath volume's directory
}

// podLatency is when one pod's files appeared and it became ready, after
// its create call began.
type podLatency struct{ configMap, secret, ready time.Duration }

// pods creates n pods at once, each with its own ConfigMap and Secret
// (created first), and waits until each has its files and is ready.
func (r *latencyRun) pods(t *testing.T, prefix string, n int) []podLatency {
	t.Helper()
	out := make([]podLatency, n)
	var wg sync.WaitGroup
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		r.env.create(t, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name}, Data: map[string]string{"k": "config " + name}})
		r.env.create(t, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name}, Data: map[string][]byte{"k": []byte("secret " + name)}})
		wg.Go(func() { out[i] = r.pod(t, name) })
	}
	wg.Wait()
	return out
}

// pod creates one pod and times it.
func (r *latencyRun) pod(t *testing.T, name string) podLatency {
	start := time.Now()
	pod, err := r.env.client.CoreV1().Pods(r.ns).Create(context.Background(), r.spec(name), metav1.CreateOptions{})
	if err != nil {
		t.Error(err)
		return podLatency{}
	}
	volumes := filepath.Join(r.a.resolvedRoot(), "pods", string(pod.UID), "volumes")
	var l podLatency
	l.configMap = waitContent(t, filepath.Join(volumes, "kubernetes.io~configmap", "config", "k"), "config "+name, start)
	l.secret = waitContent(t, filepath.Join(volumes, "kubernetes.io~secret", "creds", "k"), "secret "+name, start)
	if code, body := r.a.get("/v1/pods/" + string(pod.UID) + "?wait=30s"); code != 200 {
		t.Errorf("pod %s not ready: %d %s", name, code, body)
	}
	l.ready = time.Since(start)
	return l
}

func (r *latencyRun) spec(name string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name},
		Spec: v1.PodSpec{
			NodeName:                     r.node,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []v1.Container{{Name: "main", Image: "busybox"}},
			Volumes: []v1.Volume{
				{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: name}}}},
				{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: name}}},
				{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
				{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: r.host, Type: ptr.To(v1.HostPathDirectory)}}},
			},
		},
	}
}

// waitContent polls path every millisecond until it holds want, and
// returns how long after start that was.
func waitContent(t *testing.T, path, want string, start time.Time) time.Duration {
	deadline := start.Add(30 * time.Second)
	for {
		if got, err := os.ReadFile(path); err == nil && string(got) == want {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Errorf("%s does not hold %q after 30s", path, want)
			return 0
		}
		time.Sleep(time.Millisecond)
	}
}

// report logs the p50 and p99 of each step.
func report(t *testing.T, what string, ls []podLatency) {
	t.Helper()
	for _, step := range []struct {
		name string
		of   func(podLatency) time.Duration
	}{
		{"configMap file on disk", func(l podLatency) time.Duration { return l.configMap }},
		{"secret file on disk", func(l podLatency) time.Duration { return l.secret }},
		{"ready", func(l podLatency) time.Duration { return l.ready }},
	} {
		var ds []time.Duration
		for _, l := range ls {
			ds = append(ds, step.of(l))
		}
		slices.Sort(ds)
		figure(t, fmt.Sprintf("%s, create → %s, p50", what, step.name), ds[len(ds)/2])
		figure(t, fmt.Sprintf("%s, create → %s, p99", what, step.name), ds[(len(ds)-1)*99/100])
	}
}
