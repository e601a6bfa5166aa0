package e2e

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/volume-agent/volume-agent/deploy/chart"
	"github.com/volume-agent/volume-agent/test/controlplane"
)

// deployFile is the DaemonSet manifest the agent ships with: the agent as
// the CSI driver, with the local provisioner.
const deployFile = "../../deploy/daemonset.yaml"

// noCSIFile is the agent alone, without the CSI driver or a provisioner
// (the chart with csi.enabled false).
const noCSIFile = "../../deploy/daemonset-no-csi.yaml"

// chartDir is the Helm chart the agent ships with. With its default values
// it renders the objects of deployFile but the Namespace (deploy/chart's
// TestDefaultRendering).
const chartDir = "../../deploy/chart/volume-agent"

// clusterEnv is a control plane with the chart's objects for
// identity=serviceAccount and both provisioners, without the CSI driver
// (deploy/daemonset-no-csi.yaml with deploy/serviceaccount-mode.yaml and
// deploy/provisioners.yaml): the agents these tests run have no CSI
// endpoint, and the admission policies none of the sidecars' exceptions. A
// kubeconfig for the agent that holds a token of the ServiceAccount the
// chart makes, bound by the chart's RBAC and nothing more. That token is
// bound to no pod, so the chart's admission policies let it write no
// PersistentVolume: a provisioning agent gets nodeKubeconfig's instead.
// TestNodeIdentity runs the agent with the default identity, the node's.
type clusterEnv struct {
	cp              *controlplane.ControlPlane
	client          kubernetes.Interface
	agentKubeconfig string
}

func startCluster(t *testing.T) *clusterEnv { return startClusterWith(t, controlplane.Options{}) }

// startClusterWith is startCluster with more of the control plane (the
// scheduler, the controller manager).
func startClusterWith(t *testing.T, opts controlplane.Options) *clusterEnv {
	return startClusterValues(t, opts, serviceAccountMode)
}

// startClusterValues is startClusterWith with the objects the chart
// renders with values (nil: the default, the node identity's, where the
// ServiceAccount may do nothing).
func startClusterValues(t *testing.T, opts controlplane.Options, values map[string]any) *clusterEnv {
	needRoot(t)
	start := time.Now()
	cp := controlplane.Start(t, opts)
	figure(t, "control plane start, binaries cached", time.Since(start))
	env := &clusterEnv{cp: cp, client: cp.Client()}
	dyn, err := dynamic.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range installObjects(t, values) {
		if o.GetKind() != "DaemonSet" {
			createObject(t, dyn, o)
		}
	}
	env.agentKubeconfig = cp.KubeconfigForToken(t, serviceAccountToken(t, env.client, "volume-agent", "volume-agent"))
	return env
}

// serviceAccountFile is what the service-account mode adds to deployFile.
const serviceAccountFile = "../../deploy/serviceaccount-mode.yaml"

// provisionersFile is what dynamic provisioning adds to deployFile.
const provisionersFile = "../../deploy/provisioners.yaml"

// deployObjects decodes every document of deploy/daemonset.yaml.
func deployObjects(t *testing.T) []*unstructured.Unstructured { return fileObjects(t, deployFile) }

// fileObjects decodes every document of a manifest file.
func fileObjects(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := chart.Decode(raw)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return objs
}

// serviceAccountMode are the chart's values for the agent with its
// ServiceAccount's identity, for clusters without the Node authorizer,
// with both provisioners (their RBAC and admission policies) and without
// the CSI driver.
var serviceAccountMode = map[string]any{"identity": "serviceAccount", "provisioners": []any{"local", "nfs-subdir"},
	"csi": map[string]any{"enabled": false}}

// nodeKubeconfig returns a kubeconfig with a token of the agent's
// ServiceAccount bound to node's Node object, which must exist. Like the
// token of an agent's pod on that node (bound to the pod), it names the
// node (authentication.kubernetes.io/node-name), and the chart's admission
// policies let it write only that node's PersistentVolumes and claims.
func (env *clusterEnv) nodeKubeconfig(t *testing.T, node string) string {
	t.Helper()
	n, err := env.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Node %s for a node-bound token: %v", node, err)
	}
	return env.cp.KubeconfigForToken(t, boundToken(t, env.client, &authenticationv1.BoundObjectReference{
		Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID,
	}))
}

// boundToken requests a token of the agent's ServiceAccount bound to ref.
func boundToken(t *testing.T, c kubernetes.Interface, ref *authenticationv1.BoundObjectReference) string {
	t.Helper()
	exp := int64(3600)
	tr, err := c.CoreV1().ServiceAccounts("volume-agent").CreateToken(context.Background(), "volume-agent",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp, BoundObjectRef: ref}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for volume-agent/volume-agent bound to %s %s: %v", ref.Kind, ref.Name, err)
	}
	return tr.Status.Token
}

// installObjects are the objects the Helm install of docs/deploying.md creates, in the
// order it creates them: the namespace, labelled by kubectl (the Namespace
// of deploy/daemonset.yaml is that object), then the chart's rendering for
// the release volume-agent in it, with values over the chart's defaults,
// in Helm's install order.
func installObjects(t *testing.T, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, o := range deployObjects(t) {
		if o.GetKind() == "Namespace" {
			out = append(out, o)
		}
	}
	rendered, err := chart.Render(chartDir, chart.DefaultRelease, values)
	if err != nil {
		t.Fatal(err)
	}
	return append(out, rendered...)
}

// resources maps the kinds of deploy/daemonset.yaml and the chart to their
// resources.
var resources = map[string]schema.GroupVersionResource{
	"Namespace":                 {Version: "v1", Resource: "namespaces"},
	"ServiceAccount":            {Version: "v1", Resource: "serviceaccounts"},
	"ResourceQuota":             {Version: "v1", Resource: "resourcequotas"},
	"ClusterRole":               {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"Role":                      {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	"RoleBinding":               {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	"DaemonSet":                 {Group: "apps", Version: "v1", Resource: "daemonsets"},
	"CSIDriver":                 {Group: "storage.k8s.io", Version: "v1", Resource: "csidrivers"},
	"ValidatingAdmissionPolicy": {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
	"ValidatingAdmissionPolicyBinding": {Group: "admissionregistration.k8s.io", Version: "v1",
		Resource: "validatingadmissionpolicybindings"},
}

func resourceFor(t *testing.T, dyn dynamic.Interface, o *unstructured.Unstructured) dynamic.ResourceInterface {
	t.Helper()
	gvr, ok := resources[o.GetKind()]
	if !ok {
		t.Fatalf("kind %s (%s) has no resource mapping in the test", o.GetKind(), o.GetName())
	}
	if o.GetNamespace() != "" {
		return dyn.Resource(gvr).Namespace(o.GetNamespace())
	}
	return dyn.Resource(gvr)
}

func createObject(t *testing.T, dyn dynamic.Interface, o *unstructured.Unstructured) {
	t.Helper()
	if _, err := resourceFor(t, dyn, o).Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

// serviceAccountToken requests a token for a ServiceAccount.
func serviceAccountToken(t *testing.T, c kubernetes.Interface, namespace, name string) string {
	t.Helper()
	exp := int64(3600)
	tr, err := c.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", namespace, name, err)
	}
	return tr.Status.Token
}

// startAgent registers node (as a kubelet would) and runs an agent for it
// against the API server, with an empty manifest directory beside it (both
// sources together, like static pods).
func (env *clusterEnv) startAgent(t *testing.T, node string) *agent {
	_, err := env.client.CoreV1().Nodes().Create(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	a := newAgent(t)
	a.start("--kubeconfig", env.agentKubeconfig, "--node-name", node)
	return a
}

// waitReady waits for the pod with uid through the API's ?wait=.
func (a *agent) waitReady(uid string, timeout time.Duration) apiPod {
	a.t.Helper()
	code, body := a.get("/v1/pods/" + uid + "?wait=" + timeout.String())
	if code != 200 {
		a.t.Fatalf("pod %s not ready after %v: %d %s", uid, timeout, code, body)
	}
	p, _ := a.podByUID(uid)
	return p
}

func (a *agent) podByUID(uid string) (apiPod, bool) {
	for _, p := range a.pods() {
		if p.UID == uid {
			return p, true
		}
	}
	return apiPod{}, false
}

// podEvents lists the events about a pod with the given reason.
// checkMountedEvent waits for the one SuccessfulMountVolume event of pod,
// sent once its volumes are set up, and checks that it names each of
// volumes and is the only one: the agent sends one per pod, not one per
// volume (a volume's event would have been sent before the pod's).
func checkMountedEvent(t *testing.T, c kubernetes.Interface, pod *v1.Pod, volumes ...string) {
	t.Helper()
	var got []v1.Event
	waitFor(t, 20*time.Second, "a SuccessfulMountVolume event on pod "+pod.Name, func() (bool, string) {
		got = podEvents(t, c, pod, "SuccessfulMountVolume")
		return len(got) > 0, ""
	})
	if len(got) != 1 || got[0].Count > 1 {
		t.Fatalf("SuccessfulMountVolume events on pod %s: %+v; want one, once", pod.Name, got)
	}
	for _, v := range volumes {
		if !strings.Contains(got[0].Message, strconv.Quote(v)) {
			t.Errorf("SuccessfulMountVolume message %q does not name volume %q", got[0].Message, v)
		}
	}
}

func podEvents(t *testing.T, c kubernetes.Interface, pod *v1.Pod, reason string) []v1.Event {
	t.Helper()
	list, err := c.CoreV1().Events(pod.Namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.uid=" + string(pod.UID) + ",reason=" + reason,
	})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}
