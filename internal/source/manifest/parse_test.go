package manifest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// mustParse parses content as a file called name and fails on any problem.
func mustParse(t *testing.T, name, content string) map[key]runtime.Object {
	t.Helper()
	objs, problems := newParser("node-1").parseFile(name, []byte(content))
	for _, p := range problems {
		t.Errorf("unexpected problem: %s", p.format(name))
	}
	byKey := map[key]runtime.Object{}
	for _, o := range objs {
		byKey[o.key] = o.obj
	}
	return byKey
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseAllKinds(t *testing.T) {
	objs := mustParse(t, "all-kinds.yaml", readTestdata(t, "all-kinds.yaml"))
	want := []key{
		{kindPod, "default", "web"},
		{kindConfigMap, "default", "web-config"},
		{kindSecret, "default", "web-creds"},
		{kindPV, "", "local-data"},
		{kindPVC, "default", "web-data"},
		{kindNode, "", "node-1"},
		{kindStorageClass, "", "local-dynamic"},
	}
	if len(objs) != len(want) {
		t.Errorf("got %d objects, want %d", len(objs), len(want))
	}
	for _, k := range want {
		obj, ok := objs[k]
		if !ok {
			t.Errorf("missing %s", k)
			continue
		}
		if gvk := obj.GetObjectKind().GroupVersionKind(); gvk.Kind != k.kind || gvk.Version != "v1" {
			t.Errorf("%s: kind set to %v", k, gvk)
		}
	}
	cm := objs[key{kindConfigMap, "default", "web-config"}].(*v1.ConfigMap)
	if string(cm.BinaryData["logo.png"]) != "\x89PNG\r\n\x1a\n" || !strings.Contains(cm.Data["site.conf"], "listen 80") {
		t.Errorf("configMap content not decoded: %v %q", cm.Data, cm.BinaryData)
	}
	pv := objs[key{kindPV, "", "local-data"}].(*v1.PersistentVolume)
	if pv.Namespace != "" || pv.Spec.Local == nil || pv.Spec.Local.Path != "/mnt/disk1" {
		t.Errorf("persistentVolume decoded as %+v", pv)
	}
	sc := objs[key{kindStorageClass, "", "local-dynamic"}].(*storagev1.StorageClass)
	if gvk := sc.GroupVersionKind(); gvk.Group != "storage.k8s.io" || sc.Namespace != "" ||
		sc.Provisioner != "volume-agent.io/local" || sc.Parameters["archiveOnDelete"] != "true" ||
		*sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
		t.Errorf("storageClass decoded as %v %+v", gvk, sc)
	}
}

// A StorageClass gets the API server's defaults: reclaimPolicy Delete and
// volumeBindingMode Immediate.
func TestParseStorageClassDefaults(t *testing.T) {
	objs := mustParse(t, "sc.yaml", "{apiVersion: storage.k8s.io/v1, kind: StorageClass, metadata: {name: fast}, provisioner: example.com/x}")
	sc := objs[key{kindStorageClass, "", "fast"}].(*storagev1.StorageClass)
	if *sc.ReclaimPolicy != v1.PersistentVolumeReclaimDelete || *sc.VolumeBindingMode != storagev1.VolumeBindingImmediate {
		t.Errorf("reclaimPolicy %s, volumeBindingMode %s; want Delete and Immediate", *sc.ReclaimPolicy, *sc.VolumeBindingMode)
	}
}

func TestParseSecretStringDataMerged(t *testing.T) {
	objs := mustParse(t, "all-kinds.yaml", readTestdata(t, "all-kinds.yaml"))
	s := objs[key{kindSecret, "default", "web-creds"}].(*v1.Secret)
	if s.StringData != nil {
		t.Errorf("stringData kept: %v", s.StringData)
	}
	if string(s.Data["user"]) != "admin" || string(s.Data["password"]) != "new" {
		t.Errorf("data = %q, want user=admin and password=new (stringData wins)", s.Data)
	}
	only := mustParse(t, "s.yaml", "{apiVersion: v1, kind: Secret, metadata: {name: s}, stringData: {k: v}}")
	if got := only[key{kindSecret, "default", "s"}].(*v1.Secret).Data; string(got["k"]) != "v" {
		t.Errorf("stringData without data: data = %q", got)
	}
}

func TestParseJSON(t *testing.T) {
	objs := mustParse(t, "pod.json", readTestdata(t, "pod.json"))
	pod, ok := objs[key{kindPod, "team-a", "json-pod"}].(*v1.Pod)
	if !ok {
		t.Fatalf("pod not found in %v", objs)
	}
	if pod.UID != "2f1c3a9e-5d0b-4c1e-9a77-0e5b8d6f4a21" || pod.Spec.Volumes[0].EmptyDir == nil {
		t.Errorf("pod decoded as %+v", pod)
	}
}

func TestParseList(t *testing.T) {
	objs := mustParse(t, "list.yaml", readTestdata(t, "list.yaml"))
	for _, k := range []key{{kindPod, "default", "one"}, {kindPod, "team-b", "two"}, {kindConfigMap, "default", "settings"}} {
		if objs[k] == nil {
			t.Errorf("missing %s in %v", k, objs)
		}
	}
	if len(objs) != 3 {
		t.Errorf("got %d objects, want 3", len(objs))
	}
}

func TestParseEmptyDocumentsSkipped(t *testing.T) {
	for name, content := range map[string]string{
		"empty.yaml":    "",
		"comments.yaml": "# nothing here\n---\n\n---\n# still nothing\n",
		"blank.json":    "  \n",
		"null.yaml":     "null\n---\n~\n",
	} {
		if objs := mustParse(t, name, content); len(objs) != 0 {
			t.Errorf("%s: got %v, want no object", name, objs)
		}
	}
}

func TestParseNamespaceDefault(t *testing.T) {
	objs := mustParse(t, "ns.yaml", `
apiVersion: v1
kind: ConfigMap
metadata: {name: a}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: b, namespace: team-c}
`)
	if objs[key{kindConfigMap, "default", "a"}] == nil || objs[key{kindPVC, "team-c", "b"}] == nil {
		t.Errorf("got %v", objs)
	}
}

func TestSplitDocuments(t *testing.T) {
	tests := []struct {
		in        string
		wantLines []int
	}{
		{"a: 1\n", []int{1}},
		{"---\na: 1\n", []int{1, 2}},
		{"a: 1\n---\nb: 2\n--- # comment\nc: 3", []int{1, 3, 5}},
		{"a: 1\r\n---\r\nb: 2\r\n", []int{1, 3}},
		{"a: '---'\n---x\n", []int{1}},
	}
	for _, tt := range tests {
		var lines []int
		for _, d := range splitDocuments([]byte(tt.in)) {
			lines = append(lines, d.line)
		}
		if !slices.Equal(lines, tt.wantLines) {
			t.Errorf("splitDocuments(%q) starts documents at lines %v, want %v", tt.in, lines, tt.wantLines)
		}
	}
}

func TestIsManifestName(t *testing.T) {
	for name, want := range map[string]bool{
		"pod.yaml": true, "pod.yml": true, "pod.json": true,
		".pod.yaml": false, "..data": false, ".pod.yaml.swp": false, "pod.yaml~": false,
		"#pod.yaml#": false, "pod.yaml.tmp": false, "4913": false, "pod.txt": false, "pod.YAML": false,
	} {
		if got := isManifestName(name); got != want {
			t.Errorf("isManifestName(%q) = %v, want %v", name, got, want)
		}
	}
}

// The manifest scheme registers only the groups of the supported kinds: each
// of them must still have its Go type, which the field checks walk, and a
// kind of a group left out must still be refused by name before decoding.
func TestParserKnowsEverySupportedKind(t *testing.T) {
	p := newParser("node-1")
	for kind, apiVersion := range apiVersionOf {
		if p.types[kind] == nil {
			t.Errorf("%s %s: no Go type in the manifest scheme", apiVersion, kind)
		}
	}
	_, problems := p.parseFile("d.yaml", []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n"))
	if len(problems) != 1 || !strings.Contains(problems[0].format("d.yaml"), `unsupported kind "Deployment"`) {
		t.Errorf("a Deployment gave %v, want one problem naming the unsupported kind", problems)
	}
}
