package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/volume-agent/volume-agent/test/controlplane"
)

// firstCertLife is how long the agent's first node certificate is valid:
// long enough to set the pod up, short enough that the test outlives it.
const firstCertLife = 30 * time.Second

// TestNodeIdentity runs the agent as the deployment does by default: with
// the node's own credentials — a client certificate for
// system:node:<name> kept as a file its kubeconfig names, as on a kubeadm
// node — against an API server with the Node authorizer and
// NodeRestriction. It mounts the configMap, secret, projected token and
// claim volumes of its pod, sends its events, and goes on working after
// its certificate is rotated and the first one has expired.
func TestNodeIdentity(t *testing.T) {
	env := startCluster(t)
	ctx := context.Background()
	const ns, node = "node-identity", "node-identity-1"
	env.cp.CreateNamespace(t, ns)
	if _, err := env.client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: node, Labels: map[string]string{v1.LabelHostname: node},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	creds := env.cp.NodeCredentials(t, node, firstCertLife)
	firstExpiry := certExpiry(t, creds.CertFile)
	claimDir := disk(t, "node-identity")
	env.boundLocalClaim(t, ns, "data", "pv-node-identity", node, claimDir)
	cm, secret := appObjects(ns)
	env.create(t, cm)
	env.create(t, secret)

	a := newAgent(t)
	a.start("--kubeconfig", creds.Kubeconfig, "--node-name", node)
	pod := env.createPod(t, nodeIdentityPod(ns, "app", node))
	p := a.waitReady(string(pod.UID), 30*time.Second)
	checkFile(t, filepath.Join(p.volume("config").Path, "color"), "blue")
	checkFile(t, filepath.Join(p.volume("creds").Path, "password"), "hunter2-cluster")
	checkFile(t, filepath.Join(p.volume("vault").Path, "color"), "blue")
	checkFile(t, filepath.Join(p.volume("store").Path, "label"), "node-identity")
	env.checkToken(t, pod, filepath.Join(p.volume("vault").Path, "token"), "vault")
	checkMountedEvent(t, env.client, pod, "config", "creds", "vault", "store")
	checkNodeRights(t, env, creds.Kubeconfig, ns)
	if time.Now().After(firstExpiry) {
		t.Fatalf("set-up took past the first certificate's expiry (%v): raise firstCertLife", firstExpiry)
	}

	// Rotate as the kubelet does, wait until the first certificate has
	// expired, and restart the API server: every connection is made anew,
	// and a client that still held the first certificate would be refused.
	creds.Rotate(t, 0)
	time.Sleep(time.Until(firstExpiry) + time.Second)
	env.cp.RestartAPIServer(t)
	waitFor(t, 30*time.Second, "/readyz ok after the restart with the rotated certificate", func() (bool, string) {
		code, body := a.get("/readyz")
		return code == 200, body
	})
	cm.Data["color"] = "after-rotation"
	if _, err := env.client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "configMap update after the rotation in the volume", func() (bool, string) {
		got, _ := os.ReadFile(filepath.Join(p.volume("config").Path, "color"))
		return string(got) == "after-rotation", string(got)
	})
	// A new pod needs every kind of request again: GETs, watches, a
	// TokenRequest and events.
	second := env.createPod(t, nodeIdentityPod(ns, "second", node))
	a.waitReady(string(second.UID), 30*time.Second)
	// Events are sent in the background, and the first after the API
	// server's restart may wait for the broadcaster's retry.
	checkMountedEvent(t, env.client, second)
	// The claim and its PV were read by GET: a node may not list them.
	for _, kind := range []string{"persistentVolumeClaim", "persistentVolume"} {
		if n := len(a.logLines(t, byGetLog, map[string]string{"resource": kind})); n != 1 {
			t.Errorf("agent logged %d times that it reads %ss by GET, want once", n, kind)
		}
	}
	assertNoSecretIn(t, a, "hunter2-cluster")
}

// TestNodeIdentityProvisioning: with the node identity's RBAC and the
// local provisioner's, without the CSI driver (deploy/daemonset-no-csi.yaml
// with deploy/provisioners.yaml),
// the agent mounts with the node's certificate and provisions with the
// ServiceAccount, which may provision and nothing else, under the admission
// policies that hold it to its node: a claim of a volume-agent.io/local
// class is provisioned on the node the scheduler picks, bound by the PV
// controller, and mounted.
func TestNodeIdentityProvisioning(t *testing.T) {
	env := startClusterValues(t, controlplane.Options{ControllerManager: true, Scheduler: true},
		map[string]any{"provisioners": []any{"local"}, "csi": map[string]any{"enabled": false}})
	ctx := context.Background()
	const ns, node = "node-identity-prov", "node-identity-prov-1"
	env.cp.CreateNamespace(t, ns)
	env.schedulableNode(t, node)
	creds := env.cp.NodeCredentials(t, node, 0)
	data := filepath.Join(t.TempDir(), "local")
	a := newAgent(t)
	a.start("--kubeconfig", creds.Kubeconfig, "--provisioner-kubeconfig", env.nodeKubeconfig(t, node), "--node-name", node,
		"--provisioners", "local", "--local-path-root", data)
	env.localClass(t, "va-local", v1.PersistentVolumeReclaimDelete, nil)
	claim := env.dynamicClaim(t, ns, "data", "va-local")
	pod := env.createPod(t, unscheduledPod(ns, "use-data", "data"))
	p := a.waitReady(string(pod.UID), 60*time.Second)
	if v := p.volume("store"); v.PV != "pvc-"+string(claim.UID) {
		t.Errorf("volume store = %+v, want the provisioned PV pvc-%s", v, claim.UID)
	}
	if len(claimEvents(t, env, claim, "ProvisioningSucceeded")) == 0 {
		t.Error("no ProvisioningSucceeded event on the claim")
	}
	// The provisioners' identity reads no Secret.
	cfg, err := clientcmd.BuildConfigFromFlags("", env.agentKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the provisioners' ServiceAccount lists secrets: %v, want forbidden", err)
	}
}

// byGetLog is what the agent logs when it turns to reading claims or PVs
// one by one.
const byGetLog = "listing this resource cluster-wide is refused (a node identity); reading each object the pods refer to by GET"

// nodeIdentityPod uses a configMap, a secret, a projected token with a
// configMap, and a claim; admission adds kube-api-access-*.
func nodeIdentityPod(ns, name, node string) *v1.Pod {
	pod := clusterAppPod(ns, node)
	pod.Name = name
	pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "store", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"},
	}})
	return pod
}

// boundLocalClaim creates a local PV of dir on node and a claim bound to
// it, as the PV controller would leave them (this control plane runs
// none).
func (env *clusterEnv) boundLocalClaim(t *testing.T, ns, claim, pvName, node, dir string) {
	t.Helper()
	ctx := context.Background()
	pv := localPVFor(pvName, node, dir)
	pv.Spec.StorageClassName = ""
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(""),
			VolumeName:       pvName,
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	created, err := env.client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Phase = v1.ClaimBound
	if _, err := env.client.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: claim, UID: created.UID}
	if _, err := env.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkNodeRights proves the kubeconfig holds a node's rights and no
// more: the Node authorizer refuses it a Secret no pod of its node uses,
// and listing Secrets or claims; NodeRestriction refuses it changing
// another Node.
func checkNodeRights(t *testing.T, env *clusterEnv, kubeconfig, ns string) {
	t.Helper()
	c := clientFor(t, kubeconfig)
	ctx := context.Background()
	if _, err := c.CoreV1().Secrets("kube-system").Get(ctx, "unrelated", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node identity get of an unrelated secret: %v, want forbidden", err)
	}
	if _, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node identity list of secrets: %v, want forbidden", err)
	}
	if _, err := c.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node identity list of claims: %v, want forbidden", err)
	}
	const other = "node-identity-other"
	if _, err := env.client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: other}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"labels":{"changed-by":"another-node"}}}`)
	if _, err := c.CoreV1().Nodes().Patch(ctx, other, types.MergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node identity patch of another Node: %v, want forbidden (NodeRestriction)", err)
	}
}

// certExpiry reads the NotAfter of the first certificate in a PEM file.
func certExpiry(t *testing.T, file string) time.Time {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for {
		var block *pem.Block
		block, raw = pem.Decode(raw)
		if block == nil {
			t.Fatalf("%s: no certificate", file)
		}
		if strings.EqualFold(block.Type, "CERTIFICATE") {
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			return cert.NotAfter
		}
	}
}
