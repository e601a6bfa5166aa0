package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/volume-agent/volume-agent/test/controlplane"
	"github.com/volume-agent/volume-agent/test/csi"
	"github.com/volume-agent/volume-agent/test/node"
)

// nodeRootDir is the DaemonSet's --root-dir and hostPath, as the node sees it.
const nodeRootDir = "/var/lib/volume-agent"

// TestDaemonSetOnARealNode installs the Helm chart (whose default rendering
// is deploy/daemonset.yaml: the agent as the CSI driver, with the local
// provisioner and the upstream sidecars), with only the images (the agent's
// and the sidecars', built from the module proxy), the paths of the
// kubelet's credentials and the API server's address set as values, to a
// cluster with a real kubelet node (test/node) and checks what an operator
// would: the agent runs with the kubelet's own identity (system:node:<name>,
// Node authorizer and NodeRestriction), and its pod turns Ready, the agent
// through its probes (on --healthz-addr) and the three sidecars running
// beside it; the kubelet registers the CSI driver (CSINode), and /healthz
// has nothing to say of the chart's CSIDriver, but says what differs in an
// old one (checkOldCSIDriverReported); the status API is the node's
// /run/volume-agent/status.sock, of mode 0660, and root's CLI reads it
// there; a workload pod's configMap, secret, emptyDir and projected volumes
// appear under the DaemonSet's root directory on the node, their tmpfs
// mounts propagated out of the agent's container into the node's mount
// table; a ConfigMap update reaches the node's file; deleting the pod tears
// its directory down; and deleting the DaemonSet (as kubectl delete does)
// leaves every volume of a still-running pod mounted, the agent's
// container exiting 0. The CSI volumes themselves are TestCSIOnARealNode's.
func TestDaemonSetOnARealNode(t *testing.T) {
	needRoot(t)
	// The DaemonSet's agent serves its probes on the node's 127.0.0.1:9810
	// (--healthz-addr), and the node shares this machine's network.
	l, err := net.Listen("tcp", "127.0.0.1:9810")
	if err != nil {
		t.Fatalf("the DaemonSet's status port is taken on this machine (is an agent running?): %v", err)
	}
	l.Close()
	start := time.Now()
	cp := controlplane.Start(t, controlplane.Options{ControllerManager: true, Scheduler: true})
	// The sidecars' images: built once from the module proxy and cached
	// (test/csi), as TestCSIOnARealNode uses them.
	images := csi.Images(t, csi.Provisioner, csi.Resizer, csi.Snapshotter)
	agentImage, err := node.BuildAgentImage(binary)
	if err != nil {
		t.Fatal(err)
	}
	images[node.AgentImageRef] = agentImage
	n := node.Start(t, cp, node.Options{Images: images})
	t.Cleanup(func() { logAgentPodOnFailure(t, n) })
	figure(t, "real node: control plane and node Ready", time.Since(start))
	client := cp.Client()
	ctx := context.Background()

	installChart(t, cp)
	agentPod := waitAgentReady(t, cp)
	checkContainersReady(t, agentPod, "volume-agent", "csi-provisioner", "csi-resizer", "csi-snapshotter")
	figure(t, "real node: agent pod Ready (with its sidecars) after start", time.Since(start))
	waitCSINode(t, client, n.Name())
	if code, body := nodeHealthz(t); code != 200 || body != "ok\n" {
		t.Errorf("the agent's /healthz with the chart's CSIDriver: %d %q, want 200 ok and no warning", code, body)
	}

	cp.CreateNamespace(t, "e2e")
	createVolumeSources(t, cp)
	app := createWorkload(t, cp, "app")
	keeper := createWorkload(t, cp, "keeper")
	// The agent's ServiceAccount holds no right on Secrets or ConfigMaps
	// (deploy/chart's TestNodeIdentityGrantsNoSecrets): these volumes
	// mount with the kubelet's credentials, as the Node authorizer allows.
	for _, p := range []*v1.Pod{app, keeper} {
		waitVolumesMounted(t, n, p)
	}
	checkStatusSocket(t, n, app)
	figure(t, "real node: workload volumes mounted after start", time.Since(start))

	// A ConfigMap update reaches the node's file.
	cm, err := client.CoreV1().ConfigMaps("e2e").Get(ctx, "config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["k"] = "v2"
	if _, err := client.CoreV1().ConfigMaps("e2e").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNodeFile(t, n, volumePath(app, "kubernetes.io~configmap", "config", "k"), "v2")

	// Deleting a pod tears its directory down, mounts and all.
	if err := client.CoreV1().Pods("e2e").Delete(ctx, "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	appDir := filepath.Join(nodeRootDir, "pods", string(app.UID))
	waitFor(t, 60*time.Second, "pod app's directory removed on the node", func() (bool, string) {
		_, err := os.Stat(n.Path(appDir))
		return os.IsNotExist(err), fmt.Sprint(err, nodeMountsUnder(t, n, appDir))
	})
	if left := nodeMountsUnder(t, n, appDir); len(left) > 0 {
		t.Errorf("mounts left under %s after the pod was deleted: %v", appDir, left)
	}

	agentPod = checkOldCSIDriverReported(t, cp, agentPod)

	// kubectl delete of the DaemonSet: the agent's pod gets SIGTERM and
	// goes, and the volumes of the pod still running stay mounted (the
	// agent's documented shutdown behaviour).
	before := nodeMountsUnder(t, n, filepath.Join(nodeRootDir, "pods", string(keeper.UID)))
	if len(before) < 4 { // secret, projected, emptyDir and kube-api-access
		t.Fatalf("keeper's volumes: want at least 4 tmpfs mounts, got %v", before)
	}
	podWatch, err := client.CoreV1().Pods("volume-agent").Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + agentPod.Name, ResourceVersion: agentPod.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer podWatch.Stop()
	propagation := metav1.DeletePropagationBackground // kubectl's default
	err = client.AppsV1().DaemonSets("volume-agent").Delete(ctx, "volume-agent", metav1.DeleteOptions{PropagationPolicy: &propagation})
	if err != nil {
		t.Fatal(err)
	}
	last := lastStatusBeforeDeletion(t, podWatch.ResultChan(), 60*time.Second)
	if st := containerStatus(last, "volume-agent"); st == nil || st.State.Terminated == nil || st.State.Terminated.ExitCode != 0 {
		t.Errorf("the agent's container did not exit 0 after SIGTERM: %+v", last.ContainerStatuses)
	}
	after := nodeMountsUnder(t, n, filepath.Join(nodeRootDir, "pods", string(keeper.UID)))
	if strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("keeper's mounts changed when the DaemonSet was deleted:\nbefore %v\nafter  %v", before, after)
	}
	waitVolumesMounted(t, n, keeper) // files still there, tmpfs still mounted
	figure(t, "real node: whole test", time.Since(start))
}

// checkOldCSIDriverReported replaces the CSIDriver with one an older
// deployment could have left (podInfoOnMount false, fsGroupPolicy
// ReadWriteOnceWithFSType, which kubectl apply would not bring back where
// attachRequired differs too) and restarts the agent's pod as a rollout
// would: the new agent's /healthz names each field, the value found and
// needed and what to do, still answering 200, so the pod stays Ready and
// the liveness probe restarts nothing. The chart's object is put back.
// It returns the new agent pod.
func checkOldCSIDriverReported(t *testing.T, cp *controlplane.ControlPlane, agentPod *v1.Pod) *v1.Pod {
	t.Helper()
	ctx, drivers := context.Background(), cp.Client().StorageV1().CSIDrivers()
	shipped, err := drivers.Get(ctx, csiDriver, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: csiDriver}, Spec: *shipped.Spec.DeepCopy()}
	old.Spec.PodInfoOnMount = ptr.To(false)
	old.Spec.FSGroupPolicy = ptr.To(storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy)
	replaceCSIDriver(t, cp, old)
	if err := cp.Client().CoreV1().Pods("volume-agent").Delete(ctx, agentPod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "a new agent pod", func() (bool, string) {
		p, err := cp.Client().CoreV1().Pods("volume-agent").Get(ctx, agentPod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err, p.Status.Phase)
	})
	agentPod = waitAgentReady(t, cp)
	var body string
	waitFor(t, time.Minute, "the old CSIDriver in /healthz", func() (bool, string) {
		var code int
		code, body = nodeHealthz(t)
		return code == 200 && strings.Contains(body, "warning: CSIDriver "+csiDriver), fmt.Sprint(code, " ", body)
	})
	for _, want := range []string{"podInfoOnMount is false, the driver needs true", "fsGroupPolicy is ReadWriteOnceWithFSType, the driver needs File",
		"kubectl delete csidriver " + csiDriver} {
		if !strings.Contains(body, want) {
			t.Errorf("/healthz %q does not say %q", body, want)
		}
	}
	p, err := cp.Client().CoreV1().Pods("volume-agent").Get(ctx, agentPod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := containerStatus(p.Status, "volume-agent"); st == nil || st.RestartCount != 0 || !st.Ready {
		t.Errorf("the agent's container with the old CSIDriver: %+v, want Ready, never restarted", st)
	}
	replaceCSIDriver(t, cp, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: csiDriver, Labels: shipped.Labels}, Spec: shipped.Spec})
	return agentPod
}

// replaceCSIDriver deletes the CSIDriver and creates d, as the fix says.
func replaceCSIDriver(t *testing.T, cp *controlplane.ControlPlane, d *storagev1.CSIDriver) {
	t.Helper()
	drivers := cp.Client().StorageV1().CSIDrivers()
	if err := drivers.Delete(context.Background(), d.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := drivers.Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// nodeHealthz gets the DaemonSet agent's /healthz on the node's
// --healthz-addr, which this machine's loopback is.
func nodeHealthz(t *testing.T) (int, string) {
	t.Helper()
	resp, err := http.Get("http://127.0.0.1:9810/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// checkContainersReady checks that pod has exactly the containers names,
// each Ready.
func checkContainersReady(t *testing.T, pod *v1.Pod, names ...string) {
	t.Helper()
	var got []string
	for _, st := range pod.Status.ContainerStatuses {
		if !st.Ready {
			t.Errorf("container %s of %s is not Ready: %+v", st.Name, pod.Name, st.State)
		}
		got = append(got, st.Name)
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(names))
	if !slices.Equal(got, want) {
		t.Errorf("the agent's pod has containers %v, want %v", got, want)
	}
}

// containerStatus returns the status of the container name, or nil.
func containerStatus(st v1.PodStatus, name string) *v1.ContainerStatus {
	for i := range st.ContainerStatuses {
		if st.ContainerStatuses[i].Name == name {
			return &st.ContainerStatuses[i]
		}
	}
	return nil
}

// lastStatusBeforeDeletion follows a pod's watch until the pod is deleted
// (the kubelet deletes it once its containers ended and it reported their
// final state) and returns the last status it reported.
func lastStatusBeforeDeletion(t *testing.T, events <-chan watch.Event, timeout time.Duration) v1.PodStatus {
	t.Helper()
	var last v1.PodStatus
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("the pod watch ended before the pod was deleted")
			}
			p, isPod := ev.Object.(*v1.Pod)
			if !isPod {
				continue
			}
			if ev.Type == watch.Deleted {
				return p.Status
			}
			last = p.Status
		case <-deadline:
			t.Fatalf("the agent's pod not deleted within %v; last status %+v", timeout, last)
		}
	}
}

// installChart installs the agent as the Helm install of docs/deploying.md does: the
// labelled namespace, then every object of the chart's rendering, with
// four values set. image and the sidecars' images (csi) are the ones
// imported into the node; nodeIdentity
// names where the test node's kubelet keeps its kubeconfig and client
// certificate (GKE's paths, test/node): the agent runs with the kubelet's
// own credentials, the chart's default identity; extraEnv adds
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, for the pod's
// in-cluster config that the provisioners would use: the test cluster runs
// no kube-proxy, so the "kubernetes" Service's cluster IP (which the
// kubelet would otherwise put there) leads nowhere; they point it at the
// API server's loopback address instead, which the hostNetwork pod shares
// (the sidecars get them too: sidecarsReachAPIServer). Everything else is
// the chart's default rendering, which is deploy/daemonset.yaml
// (deploy/chart's tests).
func installChart(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	cfg := cp.AdminConfig()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	values := testClusterValues(cp)
	values["csi"] = csiImageValues()
	for _, o := range sidecarsReachAPIServer(t, installObjects(t, values), values["extraEnv"].([]any)) {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if o.GetNamespace() != "" {
			r = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		if _, err := r.Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// testClusterValues are the chart's values for the test cluster: the
// agent's image as imported into the node, where the kubelet keeps its
// credentials, and the API server's address.
func testClusterValues(cp *controlplane.ControlPlane) map[string]any {
	host, port, _ := strings.Cut(strings.TrimPrefix(cp.Server(), "https://"), ":")
	i := strings.LastIndex(node.AgentImageRef, ":")
	return map[string]any{
		"image":        map[string]any{"repository": node.AgentImageRef[:i], "tag": node.AgentImageRef[i+1:]},
		"nodeIdentity": map[string]any{"kubeconfig": node.KubeletKubeconfig, "credentialDir": node.KubeletCertDir},
		"extraEnv": []any{
			map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": host},
			map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": port},
		},
	}
}

// waitAgentReady waits until the DaemonSet's pod on the node is Ready: the
// kubelet's readiness probe got 200 from /readyz.
func waitAgentReady(t *testing.T, cp *controlplane.ControlPlane) *v1.Pod {
	t.Helper()
	var ready *v1.Pod
	waitFor(t, 2*time.Minute, "the agent's pod Ready", func() (bool, string) {
		pods, err := cp.Client().CoreV1().Pods("volume-agent").List(context.Background(),
			metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=volume-agent"})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprint(err, pods)
		}
		p := &pods.Items[0]
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
				ready = p
				return true, ""
			}
		}
		return false, fmt.Sprintf("%s: %+v", p.Status.Phase, p.Status.ContainerStatuses)
	})
	return ready
}

func createVolumeSources(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	ctx := context.Background()
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "config"}, Data: map[string]string{"k": "v1"}}
	if _, err := cp.Client().CoreV1().ConfigMaps("e2e").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sec := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, Data: map[string][]byte{"k": []byte("s1")}}
	if _, err := cp.Client().CoreV1().Secrets("e2e").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createWorkload creates a pod of the sleep image with a configMap, a
// secret, an emptyDir on tmpfs and a projected volume (and the
// kube-api-access projected volume admission adds), placed by the
// scheduler.
func createWorkload(t *testing.T, cp *controlplane.ControlPlane, name string) *v1.Pod {
	t.Helper()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []v1.Container{{Name: "sleep", Image: node.SleepImageRef}},
			Volumes: []v1.Volume{
				{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
					LocalObjectReference: v1.LocalObjectReference{Name: "config"}}}},
				{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds"}}},
				{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
				{Name: "bundle", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
					{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "config"}}},
					{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "creds"},
						Items: []v1.KeyToPath{{Key: "k", Path: "secret-k"}}}},
				}}}},
			},
		},
	}
	created, err := cp.Client().CoreV1().Pods("e2e").Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func volumePath(pod *v1.Pod, plugin, volume, file string) string {
	return filepath.Join(nodeRootDir, "pods", string(pod.UID), "volumes", plugin, volume, file)
}

// waitVolumesMounted waits until the pod's volumes are on the node under
// the agent's root directory: the files with their content, and a tmpfs on
// every volume that must not reach the disk (secret, projected, emptyDir
// medium Memory). The configMap volume is a plain directory, as with the
// kubelet.
func waitVolumesMounted(t *testing.T, n *node.Node, pod *v1.Pod) {
	t.Helper()
	waitNodeFile(t, n, volumePath(pod, "kubernetes.io~configmap", "config", "k"), "")
	waitNodeFile(t, n, volumePath(pod, "kubernetes.io~secret", "creds", "k"), "s1")
	waitNodeFile(t, n, volumePath(pod, "kubernetes.io~projected", "bundle", "secret-k"), "s1")
	waitNodeFile(t, n, volumePath(pod, "kubernetes.io~projected", "bundle", "k"), "")
	for _, v := range []struct{ plugin, volume string }{
		{"kubernetes.io~secret", "creds"},
		{"kubernetes.io~projected", "bundle"},
		{"kubernetes.io~empty-dir", "scratch"},
	} {
		dir := volumePath(pod, v.plugin, v.volume, "")
		waitFor(t, 30*time.Second, "tmpfs on "+dir+" in the node's mount table", func() (bool, string) {
			fstype, ok := nodeMount(t, n, dir)
			return ok && fstype == "tmpfs", fmt.Sprintf("mounted %v, type %q", ok, fstype)
		})
	}
}

// waitNodeFile waits until the node's file exists and, when want is not
// empty, holds want.
func waitNodeFile(t *testing.T, n *node.Node, path, want string) {
	t.Helper()
	waitFor(t, 60*time.Second, path+" on the node", func() (bool, string) {
		got, err := os.ReadFile(n.Path(path))
		return err == nil && (want == "" || string(got) == want), fmt.Sprintf("%q %v", got, err)
	})
}

// nodeMount returns the type of the mount on dir in the node's mount
// table.
func nodeMount(t *testing.T, n *node.Node, dir string) (fstype string, ok bool) {
	t.Helper()
	mounts, err := n.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if m.Mountpoint == filepath.Clean(dir) {
			fstype, ok = m.FSType, true
		}
	}
	return fstype, ok
}

// nodeMountsUnder lists the node's mount points at or below dir.
func nodeMountsUnder(t *testing.T, n *node.Node, dir string) []string {
	t.Helper()
	mounts, err := n.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range mounts {
		if m.Mountpoint == dir || strings.HasPrefix(m.Mountpoint, dir+"/") {
			out = append(out, m.Mountpoint+" "+m.FSType)
		}
	}
	return out
}

// checkStatusSocket checks the DaemonSet's status socket on the node: mode
// 0660, root's, and root's CLI waits for pod through it and lists it.
func checkStatusSocket(t *testing.T, n *node.Node, pod *v1.Pod) {
	t.Helper()
	sock := n.Path("/run/volume-agent/status.sock")
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatalf("the status socket on the node: %v", err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o660 || st.Uid != 0 || st.Gid != 0 {
		t.Errorf("the node's status socket is %v, owned by %d:%d; want a socket of mode 0660 owned by root", fi.Mode(), st.Uid, st.Gid)
	}
	if r := runCLI(t, "wait", string(pod.UID), "--addr", "unix://"+sock, "--timeout", "30s"); r.code != 0 {
		t.Errorf("wait for pod %s through the node's status socket: exit %d: %s", pod.Name, r.code, r.stderr)
	}
	if r := runCLI(t, "status", "--addr", "unix://"+sock); r.code != 0 || !strings.Contains(r.stdout, pod.Namespace+"/"+pod.Name) {
		t.Errorf("status through the node's status socket: exit %d; want 0 and pod %s/%s", r.code, pod.Namespace, pod.Name)
	}
}
