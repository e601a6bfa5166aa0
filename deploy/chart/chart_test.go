package chart

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const (
	// chartDir is the chart, relative to this package.
	chartDir = "volume-agent"
	// deployFile is the manifest the chart's default rendering must equal:
	// the agent with the local provisioner and the CSI driver.
	deployFile = "../daemonset.yaml"
	// noCSIFile is the manifest the chart renders with noCSIValues: the
	// agent alone, as the chart's default was before the CSI driver.
	noCSIFile = "../daemonset-no-csi.yaml"
	// snapshotClassFile holds what csi.snapshotClass.create adds.
	snapshotClassFile = "../snapshotclass.yaml"
	// noCSIValues turn the CSI driver off, as an install that set
	// csi.enabled: false before it was on by default: with provisioners
	// unset, no provisioner either.
	noCSIValues = "csi: {enabled: false}"
	// serviceAccountFile holds what identity=serviceAccount adds.
	serviceAccountFile = "../serviceaccount-mode.yaml"
	// provisionersFile holds what provisioners adds.
	provisionersFile = "../provisioners.yaml"
)

// TestDefaultRendering holds the chart's rendering with its default values
// to deploy/daemonset.yaml: the same objects with the same fields, compared
// as parsed objects (comments, key order and quoting aside). The one object
// the chart leaves out is the Namespace: helm install keeps its release
// record in the namespace, so that must exist first (docs/deploying.md "Helm").
func TestDefaultRendering(t *testing.T) {
	checkRendering(t, deployFile, nil)
}

// TestNoCSIRendering: an install that sets csi.enabled: false, and nothing
// else, renders deploy/daemonset-no-csi.yaml (but its Namespace): the
// agent alone, without provisioners, as the chart's defaults rendered
// before the CSI driver was on; both files create the same Namespace.
func TestNoCSIRendering(t *testing.T) {
	checkRendering(t, noCSIFile, readValues(t, noCSIValues))
	const nsKey = "Namespace /volume-agent"
	ns := objects{nsKey: fileObjects(t, noCSIFile)[nsKey]}
	for _, d := range diffObjects(ns, objects{nsKey: deployObjects(t)[nsKey]}, sides{noCSIFile + " has", deployFile + " has"}) {
		t.Error(d)
	}
}

// checkRendering holds the chart's rendering with values to file, but
// file's Namespace.
func checkRendering(t *testing.T, file string, values map[string]any) {
	t.Helper()
	want := fileObjects(t, file)
	for key, o := range want {
		if o.GetKind() != "Namespace" {
			continue
		}
		if o.GetName() != DefaultRelease.Namespace {
			t.Errorf("%s: Namespace %s, but the helm install of docs/deploying.md uses namespace %s", file, o.GetName(), DefaultRelease.Namespace)
		}
		delete(want, key)
	}
	got := render(t, DefaultRelease, values)
	if _, ok := got["Namespace /"+DefaultRelease.Namespace]; ok {
		t.Errorf("the chart renders the Namespace %s: helm install needs it to exist before the release", DefaultRelease.Namespace)
	}
	for _, d := range diffObjects(got, want, sides{"the chart renders", file + " has"}) {
		t.Error(d)
	}
}

// TestLint runs helm lint's checks on the chart (Chart.yaml, values.yaml
// against values.schema.json, the rendered templates), with its default
// values and with every value set.
func TestLint(t *testing.T) {
	for _, values := range []map[string]any{nil, readValues(t, noCSIValues), readValues(t, everyValueSet)} {
		for _, m := range lintErrors(values) {
			t.Errorf("helm lint (values %v): %v", values, m)
		}
	}
}

// lintErrors returns helm lint's warnings and errors on the chart with
// values.
func lintErrors(values map[string]any) []string {
	var out []string
	for _, m := range lint.All(chartDir, values, DefaultRelease.Namespace, false).Messages {
		if m.Severity >= support.WarningSev {
			out = append(out, m.Error())
		}
	}
	return out
}

// everyValueSet sets each value of values.yaml to something other than its
// default.
const everyValueSet = `
fullnameOverride: storage-agent
image: {repository: registry.example/volume-agent, tag: v9.9.9, pullPolicy: Always}
rootDir: /srv/volume-agent
provisioners: [local, nfs-subdir]
nodeRestriction: false
localPathRoot: /srv/volumes
reclaimDelay: 1h
metricsAddr: 0.0.0.0:9811
statusSocketGroup: "4242"
identity: serviceAccount
nodeIdentity: {kubeconfig: /var/lib/kubelet/kubeconfig, credentialDir: /var/lib/kubelet/pki-gke}
mintTokens: false
extraArgs: [--log-level=debug]
extraEnv: [{name: HTTPS_PROXY, value: "http://proxy:3128"}]
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: storage, operator: Exists, effect: NoSchedule}]
priorityClassName: system-cluster-critical
resources: {requests: {cpu: 50m, memory: 128Mi}, limits: {memory: 1Gi}}
rbac: {create: false}
csi:
  enabled: true
  kubeletDir: /var/lib/k0s/kubelet
  provisioner: {image: registry.example/csi-provisioner:v9, resources: {requests: {cpu: 20m, memory: 64Mi}, limits: {memory: 512Mi}}}
  resizer: {image: registry.example/csi-resizer:v9, resources: {requests: {cpu: 20m, memory: 64Mi}, limits: {memory: 512Mi}}}
  snapshotter: {image: registry.example/csi-snapshotter:v9, resources: {requests: {cpu: 20m, memory: 64Mi}, limits: {memory: 512Mi}}}
  snapshotClass: {create: false, default: false}
snapshotController:
  enabled: true
  image: registry.example/snapshot-controller:v9
  resources: {requests: {cpu: 20m, memory: 64Mi}, limits: {memory: 512Mi}}
`

// objects are rendered or decoded objects by key.
type objects map[string]*unstructured.Unstructured

// key names an object: its kind, namespace and name.
func key(o *unstructured.Unstructured) string {
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

func byKey(t *testing.T, list []*unstructured.Unstructured) objects {
	t.Helper()
	out := objects{}
	for _, o := range list {
		if _, dup := out[key(o)]; dup {
			t.Fatalf("%s twice", key(o))
		}
		out[key(o)] = o
	}
	return out
}

func render(t *testing.T, rel Release, values map[string]any) objects {
	t.Helper()
	list, err := Render(chartDir, rel, values)
	if err != nil {
		t.Fatal(err)
	}
	return byKey(t, list)
}

func deployObjects(t *testing.T) objects { return fileObjects(t, deployFile) }

func fileObjects(t *testing.T, file string) objects {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	list, err := Decode(raw)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return byKey(t, list)
}

// sides says what the two sides of a comparison are, in its messages.
type sides struct{ got, want string }

// diffObjects lists every difference between got and want: objects only in
// one, and each field that differs, by path.
func diffObjects(got, want objects, s sides) []string {
	var out []string
	for k := range want {
		if _, ok := got[k]; !ok {
			out = append(out, fmt.Sprintf("%s: %s it, %s no such object", k, s.want, s.got))
		}
	}
	for k, g := range got {
		w, ok := want[k]
		if !ok {
			out = append(out, fmt.Sprintf("%s: %s it, %s no such object", k, s.got, s.want))
			continue
		}
		for _, d := range s.diff("", g.Object, w.Object) {
			out = append(out, k+": "+d)
		}
	}
	sort.Strings(out)
	return out
}

// diff compares two parsed values field by field. A field absent on one
// side differs from a field present with any value, null included.
func (s sides) diff(path string, got, want any) []string {
	g, gok := got.(map[string]any)
	w, wok := want.(map[string]any)
	if gok && wok {
		var out []string
		for _, k := range sortedKeys(g, w) {
			gv, inGot := g[k]
			wv, inWant := w[k]
			switch {
			case !inWant:
				out = append(out, fmt.Sprintf("%s.%s: %s %s, %s no such field", path, k, s.got, show(gv), s.want))
			case !inGot:
				out = append(out, fmt.Sprintf("%s.%s: %s no such field, %s %s", path, k, s.got, s.want, show(wv)))
			default:
				out = append(out, s.diff(path+"."+k, gv, wv)...)
			}
		}
		return out
	}
	gl, gok := got.([]any)
	wl, wok := want.([]any)
	if gok && wok && len(gl) == len(wl) {
		var out []string
		for i := range gl {
			out = append(out, s.diff(fmt.Sprintf("%s[%d]", path, i), gl[i], wl[i])...)
		}
		return out
	}
	if reflect.DeepEqual(got, want) {
		return nil
	}
	return []string{fmt.Sprintf("%s: %s %s, %s %s", path, s.got, show(got), s.want, show(want))}
}

func sortedKeys(maps ...map[string]any) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range maps {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	return keys
}

// show prints a parsed value as JSON, its type visible ("10000" or 10000).
func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSpace(string(b))
}

// TestAgentDoesNotLinkHelm: the Helm SDK is for the tests; the agent's
// binary must not carry it.
func TestAgentDoesNotLinkHelm(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to list the agent's packages: %v", err)
	}
	out, err := exec.Command(goCmd, "list", "-deps", "github.com/volume-agent/volume-agent/cmd/volume-agent").Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/volume-agent: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "helm.sh/") || strings.HasPrefix(pkg, "github.com/volume-agent/volume-agent/deploy/") {
			t.Errorf("the agent's binary links %s", pkg)
		}
	}
}
