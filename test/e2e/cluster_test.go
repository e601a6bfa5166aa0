package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
)

// TestCluster runs the agent as a node agent of a real control plane
// (etcd + kube-apiserver on loopback, RBAC on), holding only the
// permissions the Helm chart grants it in its service-account mode (deploy/serviceaccount-mode.yaml).
func TestCluster(t *testing.T) {
	env := startCluster(t)
	t.Run("DeployManifestIsAccepted", env.testDeployDryRun)
	t.Run("PodVolumesAndTokens", env.testPodVolumes)
	t.Run("UpdatesReachVolumes", env.testUpdates)
	t.Run("DeletedPodTornDownOtherNodeIgnored", env.testDeleteAndOtherNode)
	t.Run("MissingConfigMapFailsThenRecovers", env.testMissingConfigMap)
	t.Run("SucceededPodTornDown", env.testSucceededPod)
	t.Run("ImmutableConfigMapReadOnce", env.testImmutableConfigMap)
	t.Run("EmptyDirSizes", env.testEmptyDirSizes)
	t.Run("APIServerRestart", env.testAPIServerRestart) // last: it restarts the server
}

// testDeployDryRun applies every object of deploy/daemonset.yaml, of
// deploy/daemonset-no-csi.yaml, of deploy/serviceaccount-mode.yaml, of
// deploy/provisioners.yaml and of the chart's rendering by default (the
// CSI driver), without the CSI driver in both modes, and with the local
// provisioner alone,
// with a server-side dry run: the API server validates and admits the
// DaemonSet of each, and compiles the admission policies' expressions.
func (env *clusterEnv) testDeployDryRun(t *testing.T) {
	dyn, err := dynamic.NewForConfig(env.cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	objs := append(deployObjects(t), fileObjects(t, serviceAccountFile)...)
	objs = append(objs, fileObjects(t, noCSIFile)...)
	objs = append(objs, fileObjects(t, provisionersFile)...)
	objs = append(objs, installObjects(t, nil)...)
	objs = append(objs, installObjects(t, map[string]any{"csi": map[string]any{"enabled": false}})...)
	objs = append(objs, installObjects(t, map[string]any{"provisioners": []any{"local"}, "csi": map[string]any{"enabled": false}})...)
	for _, o := range append(objs, installObjects(t, serviceAccountMode)...) {
		_, err := resourceFor(t, dyn, o).Apply(context.Background(), o.GetName(), o,
			metav1.ApplyOptions{FieldManager: "e2e", DryRun: []string{metav1.DryRunAll}, Force: true})
		if err != nil {
			t.Errorf("server-side dry-run apply of %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

func (env *clusterEnv) namespace(t *testing.T) string {
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	name = name[len("testcluster-"):]
	env.cp.CreateNamespace(t, name)
	return name
}

func (env *clusterEnv) create(t *testing.T, obj any) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch o := obj.(type) {
	case *v1.ConfigMap:
		_, err = env.client.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *v1.Secret:
		_, err = env.client.CoreV1().Secrets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	default:
		t.Fatalf("create %T: unsupported", obj)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func (env *clusterEnv) createPod(t *testing.T, pod *v1.Pod) *v1.Pod {
	t.Helper()
	out, err := env.client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// appObjects are the ConfigMap and Secret of the app pod.
func appObjects(ns string) (*v1.ConfigMap, *v1.Secret) {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-config"}, Data: map[string]string{"color": "blue"}},
		&v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-creds"}, Data: map[string][]byte{"password": []byte("hunter2-cluster")}}
}

// clusterAppPod uses configMap, secret, emptyDir, downwardAPI and a projected
// volume with a serviceAccountToken; admission adds kube-api-access-*.
func clusterAppPod(ns, node string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: map[string]string{"app": "demo"}},
		Spec: v1.PodSpec{
			NodeName: node,
			Containers: []v1.Container{{Name: "main", Image: "busybox",
				Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")}}}},
			Volumes: []v1.Volume{
				{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "app-config"}}}},
				{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "app-creds"}}},
				{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
				{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
					{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
					{Path: "cpu", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "main", Resource: "limits.cpu", Divisor: resource.MustParse("1m")}},
				}}}},
				{Name: "vault", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
					{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Audience: "vault", ExpirationSeconds: ptr.To[int64](600), Path: "token"}},
					{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "app-config"}, Items: []v1.KeyToPath{{Key: "color", Path: "color"}}}},
				}}}},
			},
		},
	}
}

// startApp creates the app's objects and pod and waits until it is ready.
func (env *clusterEnv) startApp(t *testing.T) (*agent, *v1.Pod, apiPod) {
	ns := env.namespace(t)
	node := "node-" + ns
	a := env.startAgent(t, node)
	cm, secret := appObjects(ns)
	env.create(t, cm)
	env.create(t, secret)
	start := time.Now()
	pod := env.createPod(t, clusterAppPod(ns, node))
	p := a.waitReady(string(pod.UID), 30*time.Second)
	figure(t, "pod created in the API to all volumes ready", time.Since(start))
	return a, pod, p
}

func (env *clusterEnv) testPodVolumes(t *testing.T) {
	a, pod, p := env.startApp(t)
	checkFile(t, filepath.Join(p.volume("config").Path, "color"), "blue")
	checkFile(t, filepath.Join(p.volume("creds").Path, "password"), "hunter2-cluster")
	checkFile(t, filepath.Join(p.volume("info").Path, "labels"), `app="demo"`)
	checkFile(t, filepath.Join(p.volume("info").Path, "cpu"), "250")
	checkFile(t, filepath.Join(p.volume("vault").Path, "color"), "blue")
	checkTmpfs(t, p.volume("creds").Path, "")
	checkTmpfs(t, p.volume("vault").Path, "")
	env.checkToken(t, pod, filepath.Join(p.volume("vault").Path, "token"), "vault")

	// The kube-api-access-* volume admission added: token, CA and namespace.
	var access apiVolume
	for _, v := range p.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") {
			access = v
		}
	}
	if access.State != "Mounted" {
		t.Fatalf("kube-api-access volume = %+v, want Mounted", access)
	}
	env.checkToken(t, pod, filepath.Join(access.Path, "token"), "")
	checkFile(t, filepath.Join(access.Path, "namespace"), pod.Namespace)
	checkFile(t, filepath.Join(access.Path, "ca.crt"), string(env.cp.CACert()))
	checkMountedEvent(t, env.client, pod, "config", "creds", "info", "vault", access.Name)
	assertNoSecretIn(t, a, "hunter2-cluster")
}

// checkToken asks the API server (TokenReview) whether the token in file
// is valid for audience ("" for the API server's own) and bound to pod.
func (env *clusterEnv) checkToken(t *testing.T, pod *v1.Pod, file, audience string) {
	t.Helper()
	token, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: string(token)}}
	if audience != "" {
		review.Spec.Audiences = []string{audience}
	}
	out, err := env.client.AuthenticationV1().TokenReviews().Create(context.Background(), review, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantUser := "system:serviceaccount:" + pod.Namespace + ":default"
	if !out.Status.Authenticated || out.Status.User.Username != wantUser {
		t.Fatalf("TokenReview of %s: %+v, want authenticated as %s", file, out.Status, wantUser)
	}
	if got := out.Status.User.Extra["authentication.kubernetes.io/pod-uid"]; len(got) != 1 || got[0] != string(pod.UID) {
		t.Errorf("token of %s is bound to pod %v, want %s", file, got, pod.UID)
	}
}

func (env *clusterEnv) testUpdates(t *testing.T) {
	_, pod, p := env.startApp(t)
	ctx := context.Background()
	for i := range 3 {
		cm, _ := appObjects(pod.Namespace)
		cm.Data["color"] = fmt.Sprintf("green-%d", i)
		start := time.Now()
		if _, err := env.client.CoreV1().ConfigMaps(pod.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, file := range []string{filepath.Join(p.volume("config").Path, "color"), filepath.Join(p.volume("vault").Path, "color")} {
			waitFor(t, 10*time.Second, "configMap update in "+file, func() (bool, string) {
				got, _ := os.ReadFile(file)
				return string(got) == cm.Data["color"], string(got)
			})
		}
		figure(t, fmt.Sprintf("configMap update %d (API write) to content in configMap and projected volumes", i), time.Since(start))
	}
	_, secret := appObjects(pod.Namespace)
	secret.Data["password"] = []byte("rotated")
	start := time.Now()
	if _, err := env.client.CoreV1().Secrets(pod.Namespace).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "secret update in the volume", func() (bool, string) {
		got, _ := os.ReadFile(filepath.Join(p.volume("creds").Path, "password"))
		return string(got) == "rotated", "old content"
	})
	figure(t, "secret update (API write) to content in volume", time.Since(start))
}

func (env *clusterEnv) testDeleteAndOtherNode(t *testing.T) {
	ns := env.namespace(t)
	node := "node-" + ns
	a := env.startAgent(t, node)
	other := clusterAppPod(ns, "some-other-node")
	other.Name = "elsewhere"
	other.Spec.Volumes = other.Spec.Volumes[2:3] // emptyDir only
	otherPod := env.createPod(t, other)
	mine := clusterAppPod(ns, node)
	mine.Spec.Volumes = mine.Spec.Volumes[2:3]
	pod := env.createPod(t, mine)
	a.waitReady(string(pod.UID), 30*time.Second)
	if _, ok := a.podByUID(string(otherPod.UID)); ok {
		t.Error("a pod bound to another node is served")
	}
	if _, err := os.Stat(filepath.Join(a.root, "pods", string(otherPod.UID))); !os.IsNotExist(err) {
		t.Errorf("a pod bound to another node got a directory: %v", err)
	}
	start := time.Now()
	if err := env.client.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "deleted pod's directory removed", func() (bool, string) {
		_, err := os.Stat(filepath.Join(a.root, "pods", string(pod.UID)))
		return os.IsNotExist(err), fmt.Sprint(err)
	})
	figure(t, "pod deleted in the API to pod directory removed", time.Since(start))
	if m := mountsUnder(t, a.root); len(m) > 0 {
		t.Errorf("still mounted: %v", m)
	}

	// Deleted while the agent is down: at the next start the API server,
	// authoritative, says it is gone; the agent's manifest directory,
	// empty, says nothing about the API server's pods (issue 27).
	again := clusterAppPod(ns, node)
	again.Name, again.Spec.Volumes = "again", again.Spec.Volumes[2:3]
	pod = env.createPod(t, again)
	a.waitReady(string(pod.UID), 30*time.Second)
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	if err := env.client.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	a.start(a.extra...)
	a.waitPodDirGone(string(pod.UID))
}

func (env *clusterEnv) testMissingConfigMap(t *testing.T) {
	ns := env.namespace(t)
	node := "node-" + ns
	a := env.startAgent(t, node)
	pod := clusterAppPod(ns, node)
	pod.Spec.Volumes = []v1.Volume{{Name: "late", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "late"}}}}}
	pod = env.createPod(t, pod)
	var failed []v1.Event
	waitFor(t, 20*time.Second, "FailedMount events with retries", func() (bool, string) {
		failed = podEvents(t, env.client, pod, "FailedMount")
		var count int32
		for _, e := range failed {
			count += e.Count
		}
		return count >= 3, fmt.Sprintf("%d FailedMount events so far", count)
	})
	if msg := failed[0].Message; !strings.Contains(msg, `volume "late"`) || !strings.Contains(msg, "not found") {
		t.Errorf("FailedMount message %q does not name the volume and the cause", msg)
	}
	if p, _ := a.podByUID(string(pod.UID)); p.Ready || p.volume("late").State != "Failed" {
		t.Errorf("pod = %+v, want not ready with the volume Failed", p)
	}
	start := time.Now()
	env.create(t, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "late"}, Data: map[string]string{"k": "v"}})
	p := a.waitReady(string(pod.UID), 30*time.Second)
	figure(t, "missing configMap created to pod ready (no backoff wait)", time.Since(start))
	checkFile(t, filepath.Join(p.volume("late").Path, "k"), "v")
}

func (env *clusterEnv) testAPIServerRestart(t *testing.T) {
	a, pod, p := env.startApp(t)
	mounts := mountIDsUnder(t, a.root)
	env.cp.StopAPIServer(t)
	waitFor(t, 20*time.Second, "/readyz reports the API server unreachable", func() (bool, string) {
		code, body := a.get("/readyz")
		return code == 503 && strings.Contains(body, "unreachable"), body
	})
	time.Sleep(500 * time.Millisecond)
	if now, ok := a.podByUID(string(pod.UID)); !ok || !now.Ready {
		t.Errorf("pod while the API server is down: %+v, want still ready", now)
	}
	if got := mountIDsUnder(t, a.root); got != mounts {
		t.Errorf("mounts changed while the API server was down: %s -> %s", mounts, got)
	}
	env.cp.StartAPIServer(t)
	waitFor(t, 30*time.Second, "/readyz ok again", func() (bool, string) {
		code, body := a.get("/readyz")
		return code == 200, body
	})
	cm, _ := appObjects(pod.Namespace)
	cm.Data["color"] = "after-restart"
	if _, err := env.client.CoreV1().ConfigMaps(pod.Namespace).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "update after the restart in the volume", func() (bool, string) {
		got, _ := os.ReadFile(filepath.Join(p.volume("config").Path, "color"))
		return string(got) == "after-restart", string(got)
	})
	if got := mountIDsUnder(t, a.root); got != mounts {
		t.Errorf("mounts changed across the API server restart: %s -> %s", mounts, got)
	}
}

func (env *clusterEnv) testSucceededPod(t *testing.T) {
	a, pod, p := env.startApp(t)
	pod.Status.Phase = v1.PodSucceeded
	if _, err := env.client.CoreV1().Pods(pod.Namespace).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "succeeded pod's directory removed", func() (bool, string) {
		_, err := os.Stat(filepath.Join(a.root, "pods", p.UID))
		return os.IsNotExist(err), fmt.Sprint(err)
	})
	if m := mountsUnder(t, a.root); len(m) > 0 {
		t.Errorf("still mounted after the pod succeeded: %v", m)
	}
}

func (env *clusterEnv) testImmutableConfigMap(t *testing.T) {
	ns := env.namespace(t)
	node := "node-" + ns
	a := env.startAgent(t, node)
	env.create(t, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "frozen"}, Data: map[string]string{"k": "v1"}, Immutable: ptr.To(true)})
	pod := clusterAppPod(ns, node)
	pod.Spec.Volumes = []v1.Volume{{Name: "frozen", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "frozen"}}}}}
	pod = env.createPod(t, pod)
	p := a.waitReady(string(pod.UID), 30*time.Second)
	checkFile(t, filepath.Join(p.volume("frozen").Path, "k"), "v1")
	// Read directly before its watch started ("not watched"), or by the
	// watch, which then stopped ("watch stopped").
	waitFor(t, 5*time.Second, "the immutable object no longer watched", func() (bool, string) {
		logs := a.logs.String()
		return strings.Contains(logs, "immutable object read; not watched") || strings.Contains(logs, "immutable object read; watch stopped"), "no such log line"
	})
}
