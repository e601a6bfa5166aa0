package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// testForbiddenNodeWatch: an agent that may not list Nodes says so in
// /readyz, not that the pods are "not yet listed".
func (env *clusterEnv) testForbiddenNodeWatch(t *testing.T) {
	ns := env.subtestNamespace(t)
	node := "node-" + ns
	a := env.startAgentWith(t, node, env.kubeconfigWithout(t, "no-nodes", "nodes"))
	want := fmt.Sprintf(`cannot list node %q: `, node)
	waitFor(t, settle, "/readyz names the refused Node list", func() (bool, string) {
		code, body := a.get("/readyz")
		return code == 503 && strings.Contains(body, want) && strings.Contains(body, "forbidden"), body
	})
	if _, body := a.get("/readyz"); strings.Contains(body, "unreachable") {
		t.Errorf("/readyz = %q: a refusal is an answer, not an unreachable API server", body)
	}
}

// testRejectedEventsKeepReady: every event the agent posts gets a 500 (a
// validating webhook that cannot be called, failurePolicy Fail) while a pod
// with a missing configMap keeps producing FailedMount attempts. /readyz
// stays 200 throughout: single requests do not decide reachability.
func (env *clusterEnv) testRejectedEventsKeepReady(t *testing.T) {
	ns := env.subtestNamespace(t)
	node := "node-" + ns
	env.rejectEvents(t, ns)
	a := env.startAgent(t, node)
	waitFor(t, settle, "/readyz ok", func() (bool, string) {
		code, body := a.get("/readyz")
		return code == 200, body
	})
	pod := env.createPod(t, onlyVolumes(ns, node, configMapVolume("missing", false)))
	a.waitVolume(pod, "missing", func(v apiVolume) bool { return v.State == "Failed" })
	waitFor(t, settle, "the agent's event rejected with a 500", func() (bool, string) {
		return strings.Contains(a.logs.String(), "failed calling webhook"), "no rejection in the agent's logs"
	})
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if code, body := a.get("/readyz"); code != 200 {
			t.Fatalf("/readyz = %d %q while only events fail, want 200", code, body)
		}
	}
	if n := strings.Count(a.logs.String(), "failed calling webhook"); n < 2 {
		t.Errorf("%d rejected events in the agent's logs, want several during the check", n)
	}
}

// rejectEvents makes every event create or update in namespace ns fail with
// a 500: the webhook's URL is a closed port and its failure policy is Fail.
// It checks that the API server applies it before returning.
func (env *clusterEnv) rejectEvents(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	closed := "https://" + freeAddr(t) + "/reject"
	hooks := env.client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	cfg := &admissionv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "reject-events-" + ns},
		Webhooks: []admissionv1.ValidatingWebhook{{
			Name:         "reject-events.volume-agent.test",
			ClientConfig: admissionv1.WebhookClientConfig{URL: &closed},
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
				Rule:       admissionv1.Rule{APIGroups: []string{"", "events.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"events"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			FailurePolicy:           ptr.To(admissionv1.Fail),
			SideEffects:             ptr.To(admissionv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](2),
		}},
	}
	if _, err := hooks.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hooks.Delete(context.Background(), cfg.Name, metav1.DeleteOptions{}) })
	probe := &v1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "probe-"},
		InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "probe"}, Reason: "Probe", Type: v1.EventTypeNormal}
	waitFor(t, settle, "the webhook rejects events", func() (bool, string) {
		_, err := env.client.CoreV1().Events(ns).Create(ctx, probe, metav1.CreateOptions{})
		return err != nil && strings.Contains(err.Error(), "failed calling webhook"), fmt.Sprint(err)
	})
}

// testHungAPIServer: kube-apiserver stopped with SIGSTOP answers nothing.
// client-go's HTTP/2 health check (set short here through its environment
// variables) ends the agent's silent watches and the relist times out in
// the TLS handshake: /readyz turns 503 "API server unreachable", and 200
// again once the server continues. Nothing is unmounted meanwhile.
func (env *clusterEnv) testHungAPIServer(t *testing.T) {
	t.Setenv("HTTP2_READ_IDLE_TIMEOUT_SECONDS", "2")
	t.Setenv("HTTP2_PING_TIMEOUT_SECONDS", "2")
	a, pod, p := env.startApp(t)
	waitFor(t, settle, "/readyz ok", func() (bool, string) {
		code, body := a.get("/readyz")
		return code == 200, body
	})
	mounts := mountIDsUnder(t, a.root)

	env.cp.PauseAPIServer(t)
	start := time.Now()
	waitFor(t, 45*time.Second, "/readyz reports the API server unreachable", func() (bool, string) {
		code, body := a.get("/readyz")
		return code == 503 && strings.Contains(body, "API server unreachable"), body
	})
	figure(t, "API server paused to /readyz unreachable (health check 2 s + 2 s, TLS handshake 10 s)", time.Since(start))
	if now, ok := a.podByUID(string(pod.UID)); !ok || !now.Ready {
		t.Errorf("pod while the API server hangs: %+v, want still ready", now)
	}
	if got := mountIDsUnder(t, a.root); got != mounts {
		t.Errorf("mounts changed while the API server hung: %s -> %s", mounts, got)
	}

	env.cp.ResumeAPIServer(t)
	start = time.Now()
	waitFor(t, 45*time.Second, "/readyz ok again", func() (bool, string) {
		code, body := a.get("/readyz")
		return code == 200, body
	})
	figure(t, "API server resumed to /readyz ok", time.Since(start))
	cm, _ := appObjects(pod.Namespace)
	cm.Data["color"] = "after-hang"
	if _, err := env.client.CoreV1().ConfigMaps(pod.Namespace).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settle, "an update after the hang in the volume", func() (bool, string) {
		got, _ := os.ReadFile(filepath.Join(p.volume("config").Path, "color"))
		return string(got) == "after-hang", string(got)
	})
	if got := mountIDsUnder(t, a.root); got != mounts {
		t.Errorf("mounts changed across the hang: %s -> %s", mounts, got)
	}
}
