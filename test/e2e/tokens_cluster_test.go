package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestTokens runs the service account token cases against one control
// plane: token files owned as the kubelet owns them and kept, not minted
// again, across restarts; and token volumes with --mint-tokens=false.
func TestTokens(t *testing.T) {
	env := startCluster(t)
	t.Run("OwnedAsTheKubeletDoesAndKeptAcrossRestarts", env.testTokenFiles)
	t.Run("NotMinted", env.testTokensNotMinted)
}

// tokenPod runs as user 1000 with fsGroup 2000 and has a projected token
// for audience vault; admission adds its kube-api-access-* volume.
func tokenPod(ns, node string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1.PodSpec{
			NodeName:        node,
			SecurityContext: &v1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), FSGroup: ptr.To[int64](2000)},
			Containers:      []v1.Container{{Name: "main", Image: "busybox"}},
			Volumes: []v1.Volume{
				{Name: "vault", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
					{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Audience: "vault", ExpirationSeconds: ptr.To[int64](600), Path: "token"}},
				}}}},
			},
		},
	}
}

// tokenVolume is a volume holding a token, and what the test saw of it.
type tokenVolume struct {
	name, dir, audience string
	token               []byte
	data                string // the ..data link's target
}

func (v *tokenVolume) snapshot(t *testing.T) {
	t.Helper()
	var err error
	if v.token, err = os.ReadFile(filepath.Join(v.dir, "token")); err != nil {
		t.Fatal(err)
	}
	if v.data, err = os.Readlink(filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func (env *clusterEnv) testTokenFiles(t *testing.T) {
	ns := env.tokensNamespace(t)
	node := "node-" + ns
	a := env.startAgent(t, node)
	pod := env.createPod(t, tokenPod(ns, node))
	p := a.waitReady(string(pod.UID), 30*time.Second)
	vols := []*tokenVolume{{name: "vault", audience: "vault"}, {name: kubeAPIAccess(t, p)}}
	for _, v := range vols {
		v.dir = p.volume(v.name).Path
		// As the kubelet: 0600 owned by the pods' one runAsUser, then group
		// read for fsGroup. World-readable before the fix.
		checkOwner(t, filepath.Join(v.dir, "token"), fileOwner{0o640, 1000, 2000})
		env.checkToken(t, pod, filepath.Join(v.dir, "token"), v.audience)
		v.snapshot(t)
	}
	// Only the token gets the user: the CA keeps defaultMode, owned by root.
	checkOwner(t, filepath.Join(vols[1].dir, "ca.crt"), fileOwner{0o644, 0, 2000})
	a.checkNoRefresh(t, "after the first set-up", vols)

	extra := []string{"--kubeconfig", env.agentKubeconfig, "--node-name", node}
	for _, restart := range []struct {
		how  string
		stop func()
	}{
		{"SIGTERM", func() {
			if err := a.stop(); err != nil {
				t.Fatalf("agent exit after SIGTERM: %v, want code 0", err)
			}
		}},
		{"SIGKILL", a.kill},
	} {
		restart.stop()
		a.start(extra...)
		a.waitReady(string(pod.UID), 30*time.Second)
		a.checkNoRefresh(t, "after "+restart.how, vols)
		if n := len(a.logLines(t, "token issued", nil)); n > 0 {
			t.Errorf("after %s the agent minted %d new tokens, want none", restart.how, n)
		}
		if n := len(a.logLines(t, "token in volume reused", nil)); n != len(vols) {
			t.Errorf("after %s the agent reused %d tokens found in volumes, want %d", restart.how, n, len(vols))
		}
		for _, v := range vols {
			before := *v
			v.snapshot(t)
			if !bytes.Equal(v.token, before.token) {
				t.Errorf("after %s the token in volume %s changed", restart.how, v.name)
			}
			if v.data != before.data {
				t.Errorf("after %s volume %s was rewritten: ..data %s -> %s", restart.how, v.name, before.data, v.data)
			}
			checkOwner(t, filepath.Join(v.dir, "token"), fileOwner{0o640, 1000, 2000})
		}
	}
	for _, v := range vols {
		env.checkToken(t, pod, filepath.Join(v.dir, "token"), v.audience)
	}
}

// testTokensNotMinted: with --mint-tokens=false a kube-api-access volume is
// Failed for good, with the reason and the way out, and never attempted;
// a pod with automountServiceAccountToken: false has no such volume.
func (env *clusterEnv) testTokensNotMinted(t *testing.T) {
	ns := env.tokensNamespace(t)
	node := "node-" + ns
	env.registerNode(t, node)
	a := newAgent(t)
	a.start("--kubeconfig", env.agentKubeconfig, "--node-name", node, "--mint-tokens=false")
	plain := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "needs-api"},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "main", Image: "busybox"}},
			Volumes: []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}},
	}
	optOut := plain.DeepCopy()
	optOut.Name = "no-api"
	optOut.Spec.AutomountServiceAccountToken = ptr.To(false)
	plain = env.createPod(t, plain)
	optOut = env.createPod(t, optOut)

	a.waitReady(string(optOut.UID), 30*time.Second)
	var access apiVolume
	waitFor(t, 20*time.Second, "kube-api-access volume Failed", func() (bool, string) {
		p, _ := a.podByUID(string(plain.UID))
		access = p.volume(kubeAPIAccess(t, p))
		js, _ := json.Marshal(p)
		return access.State == "Failed" && p.volume("scratch").State == "Mounted", string(js)
	})
	for _, want := range []string{"does not mint service account tokens", "--mint-tokens=false", "automountServiceAccountToken: false"} {
		if !strings.Contains(access.Error, want) {
			t.Errorf("kube-api-access error %q does not say %q", access.Error, want)
		}
	}
	if n := len(a.logLines(t, "volume set-up failed", map[string]string{"volume": access.Name})); n > 0 {
		t.Errorf("the volume's set-up was attempted %d times, want never", n)
	}
	dir := filepath.Join(a.root, "pods", string(plain.UID), "volumes", "kubernetes.io~projected", access.Name)
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("the volume was attempted: %s exists (%v)", dir, err)
	}
	if p, _ := a.podByUID(string(plain.UID)); p.Ready {
		t.Error("a pod whose kube-api-access volume failed is ready")
	}
	// One FailedMount event says why, and no retry adds more.
	var events []v1.Event
	waitFor(t, 10*time.Second, "a FailedMount event", func() (bool, string) {
		events = podEvents(t, env.client, plain, "FailedMount")
		return len(events) > 0, ""
	})
	time.Sleep(2 * time.Second) // a retry with backoff would have come by now
	events = podEvents(t, env.client, plain, "FailedMount")
	if len(events) != 1 || events[0].Count > 1 || !strings.Contains(events[0].Message, "does not mint service account tokens") {
		t.Errorf("FailedMount events = %+v; want exactly one, saying why", events)
	}
}

var notDNSLabel = regexp.MustCompile(`[^a-z0-9]+`)

// tokensNamespace creates a namespace named after the subtest.
func (env *clusterEnv) tokensNamespace(t *testing.T) string {
	sub := t.Name()[strings.LastIndex(t.Name(), "/")+1:]
	name := "tokens-" + notDNSLabel.ReplaceAllString(strings.ToLower(sub), "-")
	name = name[:min(len(name), 63)]
	env.cp.CreateNamespace(t, name)
	return name
}

// registerNode creates the Node object, as a kubelet would.
func (env *clusterEnv) registerNode(t *testing.T, node string) {
	t.Helper()
	_, err := env.client.CoreV1().Nodes().Create(t.Context(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// kubeAPIAccess returns the name of the kube-api-access-* volume admission
// added to the pod.
func kubeAPIAccess(t *testing.T, p apiPod) string {
	t.Helper()
	for _, v := range p.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") {
			return v.Name
		}
	}
	t.Fatalf("pod %s has no kube-api-access volume: %+v", p.UID, p.Volumes)
	return ""
}

// logLines returns the agent's JSON log lines with message msg and the
// given string fields.
func (a *agent) logLines(t *testing.T, msg string, fields map[string]string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(a.logs.String(), "\n") {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) != nil || entry["msg"] != msg {
			continue
		}
		match := true
		for k, v := range fields {
			match = match && entry[k] == v
		}
		if match {
			out = append(out, entry)
		}
	}
	return out
}

// checkNoRefresh checks that the token volumes were not refreshed: the
// token a set-up mints or reuses leaves the volume's version as the set-up
// recorded it. Such a refresh (which rewrote nothing) followed every token
// volume's set-up within milliseconds before; the pause lets one show.
func (a *agent) checkNoRefresh(t *testing.T, when string, vols []*tokenVolume) {
	t.Helper()
	time.Sleep(2 * time.Second)
	for _, v := range vols {
		if n := len(a.logLines(t, "volume refreshed", map[string]string{"volume": v.name})); n > 0 {
			t.Errorf("%s volume %s was refreshed %d times, want none: nothing changed since its set-up", when, v.name, n)
		}
	}
}

// fileOwner is a file's permission bits and owner.
type fileOwner struct {
	mode     os.FileMode
	uid, gid uint32
}

func checkOwner(t *testing.T, path string, want fileOwner) {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := info.Sys().(*syscall.Stat_t)
	if got := (fileOwner{info.Mode().Perm(), st.Uid, st.Gid}); got != want {
		t.Errorf("%s: mode %#o uid %d gid %d, want mode %#o uid %d gid %d", path, got.mode, got.uid, got.gid, want.mode, want.uid, want.gid)
	}
}
