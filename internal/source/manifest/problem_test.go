package manifest

import (
	"strings"
	"testing"
)

const goodClass = "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: fast}\n"

const goodPod = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: a, image: b}]}\n"

func TestParseProblems(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		content string
		want    string // the problem as shown in Status().Errors
		warning bool
	}{
		{"yaml syntax", "f.yaml", goodPod + "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: [x\n",
			`f.yaml: invalid YAML near line 9 (document 2 at line 6)`, false},
		{"json syntax", "f.json", "{\n \"apiVersion\": \"v1\",\n \"kind\": Pod\n}",
			`f.json: invalid JSON near line 3 (document 1 at line 1)`, false},
		{"wrong field type", "f.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: 5}\n",
			`f.yaml: invalid Pod: json: cannot unmarshal number into Go struct field PodSpec.spec.containers of type []v1.Container (document 1 at line 1, Pod/web)`, false},
		{"unknown kind", "f.yaml", strings.Replace(goodPod, "kind: Pod", "kind: Pood", 1),
			`f.yaml: unsupported kind "Pood" (apiVersion "v1")`, false},
		{"unsupported kind", "f.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
			`unsupported kind "Deployment" (apiVersion "apps/v1")`, false},
		{"wrong apiVersion", "f.yaml", strings.Replace(goodPod, "v1", "v2", 1),
			`unsupported kind "Pod" (apiVersion "v2")`, false},
		{"missing apiVersion", "f.yaml", "kind: Pod\nmetadata: {name: web}\n",
			`f.yaml: apiVersion is missing (document 1 at line 1, Pod/web)`, false},
		{"missing kind", "f.yaml", "apiVersion: v1\nmetadata: {name: web}\n",
			`f.yaml: kind is missing (document 1 at line 1)`, false},
		{"not an object", "f.yaml", "- a\n- b\n", `f.yaml: document is not an object (document 1 at line 1)`, false},
		{"missing name", "f.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: x}\n",
			`f.yaml: metadata.name is missing (document 1 at line 1, ConfigMap)`, false},
		{"invalid name", "f.yaml", strings.Replace(goodPod, "name: web", "name: Web_1", 1),
			`f.yaml: invalid metadata.name "Web_1": a lowercase RFC 1123 subdomain`, false},
		{"invalid namespace", "f.yaml", strings.Replace(goodPod, "name: web", "name: web, namespace: team.a", 1),
			`f.yaml: invalid metadata.namespace "team.a": must not contain dots`, false},
		{"uid with slash", "f.yaml", strings.Replace(goodPod, "name: web", "name: web, uid: ../../etc", 1),
			`f.yaml: metadata.uid "../../etc" is not a safe directory name`, false},
		{"uid dot", "f.yaml", strings.Replace(goodPod, "name: web", "name: web, uid: '..'", 1),
			`metadata.uid ".." is not a safe directory name`, false},
		{"duplicate", "f.yaml", goodPod + "---\n" + goodPod,
			`f.yaml: duplicate Pod default/web: already defined in document 1 at line 1 (document 2 at line 6, Pod/web)`, false},
		{"duplicate uid", "f.yaml", strings.Replace(goodPod, "name: web", "name: a, uid: u1", 1) + "---\n" +
			strings.Replace(goodPod, "name: web", "name: b, uid: u1", 1),
			`f.yaml: pod uid "u1" is already used by the pod in document 1 at line 1 (document 2 at line 6, Pod/b)`, false},
		{"nested list", "f.yaml", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: List, items: []}\n",
			`f.yaml: a List inside a List is not supported (document 1 at line 1, item 1, List)`, false},
		{"bad list item", "f.yaml", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pood, metadata: {name: x}}\n",
			`(document 1 at line 1, item 1, Pood/x)`, false},
		{"storage class without provisioner", "f.yaml", "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: fast}\n",
			`f.yaml: provisioner is missing (document 1 at line 1, StorageClass/fast)`, false},
		{"storage class with an invalid provisioner", "f.yaml", goodClass + "provisioner: a/b/c\n",
			`f.yaml: invalid provisioner "a/b/c": a valid label key must consist of`, false},
		{"storage class reclaim policy", "f.yaml", goodClass + "provisioner: x.io/p\nreclaimPolicy: Recycle\n",
			`f.yaml: invalid reclaimPolicy "Recycle": want Delete or Retain (document 1 at line 1, StorageClass/fast)`, false},
		{"storage class binding mode", "f.yaml", goodClass + "provisioner: x.io/p\nvolumeBindingMode: Later\n",
			`f.yaml: invalid volumeBindingMode "Later": want Immediate or WaitForFirstConsumer`, false},
		{"storage class archiveOnDelete", "f.yaml", goodClass + "provisioner: volume-agent.io/local\nparameters: {archiveOnDelete: \"yes\"}\n",
			`f.yaml: parameters.archiveOnDelete "yes": want "true" or "false" (document 1 at line 1, StorageClass/fast)`, false},
		{"storage class in v1", "f.yaml", strings.Replace(goodClass, "storage.k8s.io/v1", "v1", 1) + "provisioner: x.io/p\n",
			`unsupported kind "StorageClass" (apiVersion "v1")`, false},
		{"storage class without a name", "f.yaml", "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nprovisioner: x.io/p\n",
			`f.yaml: metadata.name is missing (document 1 at line 1, StorageClass)`, false},
		{"unknown field", "f.yaml", strings.Replace(goodPod, "image: b", "image: b, imagee: c", 1),
			`f.yaml: warning: unknown field "spec.containers[0].imagee" (document 1 at line 1, Pod/web)`, true},
		{"duplicate key", "f.yaml", goodPod + "---\n" + "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  a: one\n  a: two\n",
			`f.yaml: warning: line 11: key "a" already set in map (document 2 at line 6, ConfigMap/c)`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, problems := newParser("node-1").parseFile(tt.file, []byte(tt.content))
			if len(problems) != 1 {
				t.Fatalf("got %d problems %v, want 1", len(problems), problems)
			}
			p := problems[0]
			if got := p.format(tt.file); !strings.Contains(got, tt.want) {
				t.Errorf("problem = %s\nwant it to contain %s", got, tt.want)
			}
			if p.warning != tt.warning {
				t.Errorf("warning = %v, want %v", p.warning, tt.warning)
			}
		})
	}
}

func TestParseLargeFileRejected(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "big.yaml", strings.Repeat("#", maxFileSize+1))
	_, _, err := readManifest(dir + "/big.yaml")
	if err == nil || !strings.Contains(err.Error(), "larger than 16 MiB") {
		t.Errorf("readManifest of a too large file: %v", err)
	}
}
