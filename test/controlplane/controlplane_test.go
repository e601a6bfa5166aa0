package controlplane_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/connrotation"

	"github.com/volume-agent/volume-agent/test/controlplane"
)

func TestMain(m *testing.M) {
	// IgnoreCurrent skips goroutines started by package init (klog's flush
	// daemon); anything the control plane or its clients leave is a leak.
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent())
}

const (
	ns       = "e2e"
	nodeName = "node-1"
	issuer   = "https://kubernetes.default.svc.cluster.local"
	waitFor  = 30 * time.Second
)

func TestControlPlane(t *testing.T) {
	cp := controlplane.Start(t, controlplane.Options{ControllerManager: true, Scheduler: true})
	client := cp.Client()
	ctx := t.Context()

	cp.CreateNamespace(t, ns)
	createSchedulableNode(t, client)
	pod := createPod(t, client, "bound", nodeName)
	checkAPIAccessVolume(t, pod)

	token := requestToken(t, client, pod)
	checkTokenReview(t, client, token)
	checkTokenKubeconfig(t, cp, token)

	checkScheduled(t, client, createPod(t, client, "scheduled", ""))
	checkPVBinding(t, client)

	cp.RestartAPIServer(t)
	if _, err := client.CoreV1().Pods(ns).Get(ctx, "bound", metav1.GetOptions{}); err != nil {
		t.Fatalf("get pod after kube-apiserver restart: %v", err)
	}
	checkRootCAConfigMap(t, cp)
}

// TestWithoutControllerManager checks that CreateNamespace stands in for the
// controllers, and that the API server can be stopped and started.
func TestWithoutControllerManager(t *testing.T) {
	cp := controlplane.Start(t, controlplane.Options{})
	client := cp.Client()
	ctx := t.Context()

	cp.CreateNamespace(t, ns)
	checkRootCAConfigMap(t, cp)
	checkAPIAccessVolume(t, createPod(t, client, "bound", nodeName))

	cp.StopAPIServer(t)
	if _, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil {
		t.Fatalf("get namespace with kube-apiserver stopped: got no error")
	}
	cp.StartAPIServer(t)
	if _, err := client.CoreV1().Pods(ns).Get(ctx, "bound", metav1.GetOptions{}); err != nil {
		t.Fatalf("get pod after kube-apiserver start: %v", err)
	}
}

// TestWarmCacheRunsNoGoCommand proves a warm cache needs no `go` command:
// with an empty PATH, Binaries fails if it tries to build anything.
func TestWarmCacheRunsNoGoCommand(t *testing.T) {
	want := controlplane.Binaries(t)
	t.Setenv("PATH", "")
	if got := controlplane.Binaries(t); got != want {
		t.Fatalf("Binaries() = %q on the second call, want %q", got, want)
	}
}

// createSchedulableNode creates a Node with capacity and without the
// not-ready taint that TaintNodesByCondition admission puts on every new
// Node (there is no kubelet and no node lifecycle controller to lift it).
func createSchedulableNode(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	ctx := t.Context()
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName},
		Status: corev1.NodeStatus{
			Capacity: resources, Allocatable: resources,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	node, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node: %v", err)
	}
	node.Spec.Taints = nil
	if _, err := client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("remove taints of node: %v", err)
	}
}

// createPod creates a pod (bound to node if it is set) and reads it back.
func createPod(t *testing.T, client kubernetes.Interface, name, node string) *corev1.Pod {
	t.Helper()
	ctx := t.Context()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	got, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	if node != "" && got.Spec.NodeName != node { // without a node, the scheduler may have bound it already
		t.Fatalf("pod %s: nodeName = %q, want %q", name, got.Spec.NodeName, node)
	}
	return got
}

// checkAPIAccessVolume checks that ServiceAccount admission added the
// projected kube-api-access-* volume.
func checkAPIAccessVolume(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	for _, v := range pod.Spec.Volumes {
		if !strings.HasPrefix(v.Name, "kube-api-access-") || v.Projected == nil {
			continue
		}
		var token, ca bool
		for _, s := range v.Projected.Sources {
			token = token || s.ServiceAccountToken != nil
			ca = ca || (s.ConfigMap != nil && s.ConfigMap.Name == controlplane.RootCAConfigMap)
		}
		if !token || !ca {
			t.Fatalf("volume %s lacks the token or the %s source: %+v", v.Name, controlplane.RootCAConfigMap, v.Projected.Sources)
		}
		return
	}
	t.Fatalf("pod %s has no kube-api-access-* projected volume: %+v", pod.Name, pod.Spec.Volumes)
}

// requestToken gets a token for the pod's ServiceAccount, bound to the pod.
func requestToken(t *testing.T, client kubernetes.Interface, pod *corev1.Pod) string {
	t.Helper()
	expiry := int64(600)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{issuer},
		ExpirationSeconds: &expiry,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	resp, err := client.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), pod.Spec.ServiceAccountName, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("request token: %v", err)
	}
	return resp.Status.Token
}

func checkTokenReview(t *testing.T, client kubernetes.Interface, token string) {
	t.Helper()
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
	got, err := client.AuthenticationV1().TokenReviews().Create(t.Context(), review, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("review token: %v", err)
	}
	if want := "system:serviceaccount:" + ns + ":default"; !got.Status.Authenticated || got.Status.User.Username != want {
		t.Fatalf("token review: authenticated %v as %q (%s), want %q", got.Status.Authenticated, got.Status.User.Username, got.Status.Error, want)
	}
}

// checkTokenKubeconfig asks the API server who the token kubeconfig is.
func checkTokenKubeconfig(t *testing.T, cp *controlplane.ControlPlane, token string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.KubeconfigForToken(t, token))
	if err != nil {
		t.Fatalf("load token kubeconfig: %v", err)
	}
	dialer := connrotation.NewDialer((&net.Dialer{}).DialContext)
	defer dialer.CloseAll() // client-go would keep the connection, and goroutines, alive
	cfg.Dial = dialer.DialContext
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client from token kubeconfig: %v", err)
	}
	got, err := client.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self subject review with token kubeconfig: %v", err)
	}
	if want := "system:serviceaccount:" + ns + ":default"; got.Status.UserInfo.Username != want {
		t.Fatalf("token kubeconfig authenticates as %q, want %q", got.Status.UserInfo.Username, want)
	}
}

// checkScheduled waits until kube-scheduler binds the pod to the node.
func checkScheduled(t *testing.T, client kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	poll(t, "pod "+pod.Name+" scheduled", func(ctx context.Context) (bool, error) {
		got, err := client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && got.Spec.NodeName == nodeName, err
	})
}

// checkPVBinding waits until kube-controller-manager binds a claim to a
// pre-provisioned volume.
func checkPVBinding(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	ctx := t.Context()
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	empty := ""
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               size,
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/pv-1"}},
		},
	}
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create persistentVolume: %v", err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim-1"},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &empty,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: size},
		},
	}
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create persistentVolumeClaim: %v", err)
	}
	poll(t, "claim bound", func(ctx context.Context) (bool, error) {
		got, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, pvc.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.ClaimBound, err
	})
}

// checkRootCAConfigMap checks that kube-root-ca.crt in the namespace holds
// the cluster CA.
func checkRootCAConfigMap(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	cm, err := cp.Client().CoreV1().ConfigMaps(ns).Get(t.Context(), controlplane.RootCAConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s: %v", controlplane.RootCAConfigMap, err)
	}
	if got, want := cm.Data["ca.crt"], string(cp.CACert()); got != want {
		t.Fatalf("%s: ca.crt = %q, want the cluster CA %q", controlplane.RootCAConfigMap, got, want)
	}
}

// poll waits up to waitFor for cond; errors from cond are retried.
func poll(t *testing.T, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, waitFor, true, func(ctx context.Context) (bool, error) {
		done, err := cond(ctx)
		last = err
		return done, nil
	})
	if err != nil {
		t.Fatalf("wait for %s: %v (last error: %v)", what, err, last)
	}
}
