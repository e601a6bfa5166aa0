package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const goodClass = "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: fast}\n"

const goodPod = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: a, image: b}]}\n"

// podWith is a pod in block style whose spec ends with extra, indented
// under spec; its first container is at line 6.
func podWith(extra string) string {
	return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n    image: nginx\n" + extra
}

// listItem indents a document as an item of a List.
func listItem(doc string) string {
	return "- " + strings.ReplaceAll(strings.TrimSuffix(doc, "\n"), "\n", "\n  ") + "\n"
}

// TestParseProblems: each message as Status().Errors, the logs and
// volume-agent validate show it, exactly: the file, the line (of the field
// where there is one), the field path, what is wrong; the document and
// object only in a file of several documents or a List.
func TestParseProblems(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		content string
		want    []string
	}{
		// Syntax: the parser's reason at its line.
		{"yaml syntax in a flow sequence", "f.yaml", goodPod + "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: [x\n",
			[]string{`f.yaml:9: invalid YAML: did not find expected ',' or ']' (document 2)`}},
		{"yaml indentation", "f.yaml", podWith("    volumeMounts:\n    - name: a\n   mountPath: /a\n"),
			[]string{`f.yaml:11: invalid YAML: did not find expected key`}},
		{"yaml mapping on the first line", "f.yaml", "kind: Pod: x\n",
			[]string{`f.yaml:1: invalid YAML: mapping values are not allowed in this context`}},
		{"yaml tab", "f.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n\tname: web\n",
			[]string{`f.yaml:4: invalid YAML: found character that cannot start any token`}},
		{"yaml unterminated quote", "f.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: \"web}\n\n",
			[]string{`f.yaml:3: invalid YAML: found unexpected end of stream`}},
		{"yaml sequence item in a mapping", "f.yaml", "apiVersion: v1\n- kind: Pod\n",
			[]string{`f.yaml:2: invalid YAML: did not find expected key`}},
		{"yaml error without a reason to show", "f.yaml", "apiVersion: v1\nkind: *nope\n",
			[]string{`f.yaml:1: invalid YAML`}},
		{"json syntax", "f.json", "{\n \"apiVersion\": \"v1\",\n \"kind\": Pod\n}",
			[]string{`f.json:3: invalid JSON: invalid character looking for beginning of value`}},
		{"json syntax, punctuation", "f.json", "{\n \"apiVersion\": \"v1\",\n \"kind\" \"Pod\"\n}",
			[]string{`f.json:3: invalid JSON: invalid character '"' after object key`}},
		{"json cut short", "f.json", "{\n \"apiVersion\": \"v1\",\n",
			[]string{`f.json:2: invalid JSON: unexpected end of JSON input`}},

		// Fields of the wrong type, with the field path and what is wanted.
		{"wrong field type", "f.yaml", podWith("  volumes: {name: a}\n"),
			[]string{`f.yaml:9: spec.volumes: want a list, got an object`}},
		{"number for a string", "f.yaml", podWith("  nodeName: 12\n"),
			[]string{`f.yaml:9: spec.nodeName: want a string, got a number (write the value in quotes)`}},
		{"yes for a string", "f.yaml", strings.Replace(podWith(""), "image: nginx", "image: yes", 1),
			[]string{`f.yaml:8: spec.containers[0].image: want a string, got a boolean (write the value in quotes)`}},
		{"number for a string in JSON", "f.json", `{"apiVersion": "v1", "kind": "Pod",` + "\n" + `"metadata": {"name": 5}}`,
			[]string{`f.json:2: metadata.name: want a string, got a number`}},
		{"string for an integer", "f.yaml", podWith("    ports: [{containerPort: http}]\n"),
			[]string{`f.yaml:9: spec.containers[0].ports[0].containerPort: want an integer, got a string`}},
		{"fraction for an integer", "f.yaml", podWith("  terminationGracePeriodSeconds: 1.5\n"),
			[]string{`f.yaml:9: spec.terminationGracePeriodSeconds: want an integer, got 1.5`}},
		{"integer out of range", "f.yaml", podWith("    ports: [{containerPort: 99999999999}]\n"),
			[]string{`f.yaml:9: spec.containers[0].ports[0].containerPort: 99999999999 is out of range for an integer of 32 bits`}},
		{"string for a boolean", "f.yaml", podWith("  hostNetwork: \"true\"\n"),
			[]string{`f.yaml:9: spec.hostNetwork: want true or false, got a string`}},
		{"list for an object", "f.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: [a, b]\n",
			[]string{`f.yaml:4: data: want an object, got a list`}},
		{"map key", "f.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  app.conf: x\n  port: 8080\n",
			[]string{`f.yaml:6: data["port"]: want a string, got a number (write the value in quotes)`}},
		{"label", "f.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  labels:\n    app.kubernetes.io/part: {a: b}\n",
			[]string{`f.yaml:6: metadata.labels["app.kubernetes.io/part"]: want a string, got an object`}},
		{"int or string", "f.yaml", podWith("    livenessProbe: {httpGet: {port: [80]}}\n"),
			[]string{`f.yaml:9: spec.containers[0].livenessProbe.httpGet.port: want an integer or a string, got a list`}},
		{"quantity", "f.yaml", podWith("  volumes:\n  - name: cache\n    emptyDir:\n      sizeLimit: 1Gb\n"),
			[]string{`f.yaml:12: spec.volumes[0].emptyDir.sizeLimit: invalid quantity "1Gb": want a number with an optional unit, such as 1Gi, 512Mi, 1G or 500m`}},
		{"quantity of the wrong type", "f.yaml", podWith("    resources: {limits: {memory: {a: 1}}}\n"),
			[]string{`f.yaml:9: spec.containers[0].resources.limits["memory"]: want a quantity such as 1Gi or 500m, got an object`}},
		{"time", "f.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  creationTimestamp: yesterday\n",
			[]string{`f.yaml:5: metadata.creationTimestamp: invalid time "yesterday": want a time such as 2024-05-01T12:00:00Z`}},
		{"base64", "f.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata:\n  token: not base64!\n",
			[]string{`f.yaml:5: data["token"]: want base64-encoded text, got text that is not base64`}},
		{"header field of the wrong type", "f.yaml", "apiVersion: v1\nkind: [Pod]\n",
			[]string{`f.yaml:2: kind: want a string, got a list`}},
		{"metadata of the wrong type", "f.yaml", "apiVersion: v1\nkind: Pod\nmetadata: web\n",
			[]string{`f.yaml:3: metadata: want an object, got a string`}},
		{"list items of the wrong type", "f.yaml", "apiVersion: v1\nkind: List\nitems: {}\n",
			[]string{`f.yaml:3: items: want a list, got an object`}},
		{"several problems, in line order", "f.yaml", podWith("  nodeName: 12\n  hostNetwork: \"yes\"\n"),
			[]string{`f.yaml:9: spec.nodeName: want a string, got a number (write the value in quotes)`,
				`f.yaml:10: spec.hostNetwork: want true or false, got a string`}},

		// Unknown and repeated fields reject the file, as kubectl apply does.
		{"unknown field", "f.yaml", podWith("  volumes:\n  - name: cache\n    emptyDir:\n      sizeLimt: 1Gi\n"),
			[]string{`f.yaml:12: spec.volumes[0].emptyDir.sizeLimt: unknown field (did you mean sizeLimit?)`}},
		{"unknown field deep in a list", "f.yaml", podWith("    volumeMounts:\n    - name: cache\n      mountPath: /cache\n      subPathh: x\n"),
			[]string{`f.yaml:12: spec.containers[0].volumeMounts[0].subPathh: unknown field (did you mean subPath?)`}},
		{"unknown field in another case", "f.yaml", podWith("  NodeName: a\n"),
			[]string{`f.yaml:9: spec.NodeName: unknown field (did you mean nodeName?)`}},
		{"unknown field, nothing close", "f.yaml", podWith("  replicas: 3\n"),
			[]string{`f.yaml:9: spec.replicas: unknown field`}},
		{"unknown top-level field", "f.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstrngData: {pw: x}\n",
			[]string{`f.yaml:4: strngData: unknown field (did you mean stringData?)`}},
		{"unknown metadata field", "f.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  lables: {a: b}\n",
			[]string{`f.yaml:5: metadata.lables: unknown field (did you mean labels?)`}},
		{"unknown field in JSON", "f.json", "{\"apiVersion\": \"v1\", \"kind\": \"Pod\",\n \"metadata\": {\"name\": \"web\"},\n \"spec\": {\"containers\": [],\n  \"nodename\": \"a\"}}",
			[]string{`f.json:4: spec.nodename: unknown field (did you mean nodeName?)`}},
		{"repeated key", "f.yaml", goodPod + "---\n" + "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  a: one\n  a: two\n",
			[]string{`f.yaml:11: data["a"]: given more than once (first at line 10) (document 2, ConfigMap/c)`}},
		{"repeated field", "f.yaml", podWith("    image: nginx:2\n"),
			[]string{`f.yaml:9: spec.containers[0].image: given more than once (first at line 8)`}},
		{"repeated key in a flow mapping", "f.yaml", "{apiVersion: v1, kind: ConfigMap, metadata: {name: c}, data: {k: a, k: b}}\n",
			[]string{`f.yaml:1: data["k"]: given more than once (first at line 1)`}},
		{"repeated field in JSON", "f.json", "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\",\n \"metadata\": {\"name\": \"c\",\n  \"name\": \"d\"}}",
			[]string{`f.json:3: metadata.name: given more than once (first at line 2)`}},

		// Objects the agent cannot use.
		{"unknown kind", "f.yaml", strings.Replace(goodPod, "kind: Pod", "kind: Pood", 1),
			[]string{`f.yaml:2: unsupported kind "Pood" (apiVersion "v1"): only v1 Pod, ConfigMap, Secret, PersistentVolume, PersistentVolumeClaim, Node and List, storage.k8s.io/v1 StorageClass, and snapshot.storage.k8s.io/v1 VolumeSnapshot and VolumeSnapshotClass are read`}},
		{"wrong apiVersion", "f.yaml", strings.Replace(goodPod, "v1", "v2", 1),
			[]string{`f.yaml:2: unsupported kind "Pod" (apiVersion "v2"): only v1 Pod, ConfigMap, Secret, PersistentVolume, PersistentVolumeClaim, Node and List, storage.k8s.io/v1 StorageClass, and snapshot.storage.k8s.io/v1 VolumeSnapshot and VolumeSnapshotClass are read`}},
		{"missing apiVersion", "f.yaml", "kind: Pod\nmetadata: {name: web}\n", []string{`f.yaml:1: apiVersion is missing`}},
		{"missing kind", "f.yaml", "# a pod\napiVersion: v1\nmetadata: {name: web}\n", []string{`f.yaml:2: kind is missing`}},
		{"not an object", "f.yaml", "- a\n- b\n", []string{`f.yaml:1: document is not an object`}},
		{"missing name", "f.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: x}\n", []string{`f.yaml:3: metadata.name is missing`}},
		{"missing metadata", "f.yaml", "apiVersion: v1\nkind: ConfigMap\n", []string{`f.yaml:1: metadata.name is missing`}},
		{"invalid namespace", "f.yaml", strings.Replace(goodPod, "name: web", "name: web, namespace: team.a", 1),
			[]string{`f.yaml:3: invalid metadata.namespace "team.a": must not contain dots`}},
		{"uid with slash", "f.yaml", strings.Replace(podWith(""), "name: web", "name: web\n  uid: ../../etc", 1),
			[]string{`f.yaml:5: metadata.uid "../../etc" is not a safe directory name (letters, digits, '.', '_', '-', starting with a letter or digit, at most 128)`}},
		{"duplicate", "f.yaml", goodPod + "---\n" + goodPod,
			[]string{`f.yaml:6: duplicate Pod default/web: already defined at line 1 (document 2, Pod/web)`}},
		{"duplicate uid", "f.yaml", strings.Replace(goodPod, "name: web", "name: a, uid: u1", 1) + "---\n" +
			strings.Replace(goodPod, "name: web", "name: b, uid: u1", 1),
			[]string{`f.yaml:6: pod uid "u1" is already used by the pod at line 1 (document 2, Pod/b)`}},
		{"nested list", "f.yaml", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: List, items: []}\n",
			[]string{`f.yaml:4: a List inside a List is not supported (item 1, List)`}},
		{"bad list item", "f.yaml", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\n  spec: {containers: []}\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: b}\n  spec:\n    containers: []\n    nodeName: [x]\n",
			[]string{`f.yaml:13: spec.nodeName: want a string, got a list (item 2, Pod/b)`}},
		{"repeated field in a list item", "f.yaml", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c\n    name: d\n",
			[]string{`f.yaml:8: metadata.name: given more than once (first at line 7) (item 1, ConfigMap/d)`}},
		{"repeated key of a list", "f.yaml", "apiVersion: v1\nkind: List\nitems: []\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}\n",
			[]string{`f.yaml:4: items: given more than once (first at line 3)`}},
		{"duplicate list item", "f.yaml", "apiVersion: v1\nkind: List\nitems:\n" + listItem(goodPod) + listItem(goodPod),
			[]string{`f.yaml:8: duplicate Pod default/web: already defined at line 4 (item 1) (item 2, Pod/web)`}},
		{"storage class without provisioner", "f.yaml", goodClass,
			[]string{`f.yaml:1: provisioner is missing`}},
		{"storage class reclaim policy", "f.yaml", goodClass + "provisioner: x.io/p\nreclaimPolicy: Recycle\n",
			[]string{`f.yaml:5: invalid reclaimPolicy "Recycle": want Delete or Retain`}},
		{"storage class binding mode", "f.yaml", goodClass + "provisioner: x.io/p\nvolumeBindingMode: Later\n",
			[]string{`f.yaml:5: invalid volumeBindingMode "Later": want Immediate or WaitForFirstConsumer`}},
		{"storage class archiveOnDelete", "f.yaml", goodClass + "provisioner: volume-agent.io/local\nparameters:\n  archiveOnDelete: \"yes\"\n",
			[]string{`f.yaml:6: parameters.archiveOnDelete "yes": want "true" or "false"`}},
		{"storage class in v1", "f.yaml", strings.Replace(goodClass, "storage.k8s.io/v1", "v1", 1) + "provisioner: x.io/p\n",
			[]string{`f.yaml:2: unsupported kind "StorageClass" (apiVersion "v1"): only v1 Pod, ConfigMap, Secret, PersistentVolume, PersistentVolumeClaim, Node and List, storage.k8s.io/v1 StorageClass, and snapshot.storage.k8s.io/v1 VolumeSnapshot and VolumeSnapshotClass are read`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, problems := newParser("node-1").parseFile(tt.file, []byte(tt.content))
			var got []string
			for _, p := range problems {
				got = append(got, p.format(tt.file))
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("problems\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestParseProblemsQuotingValidation: the names Kubernetes refuses, with
// its own explanation after ours.
func TestParseProblemsQuotingValidation(t *testing.T) {
	for content, want := range map[string]string{
		strings.Replace(goodPod, "name: web", "name: Web_1", 1): `f.yaml:3: invalid metadata.name "Web_1": a lowercase RFC 1123 subdomain`,
		goodClass + "provisioner: a/b/c\n":                      `f.yaml:4: invalid provisioner "a/b/c": a valid label key must consist of`,
	} {
		_, problems := newParser("node-1").parseFile("f.yaml", []byte(content))
		if len(problems) != 1 || !strings.HasPrefix(problems[0].format("f.yaml"), want) {
			t.Errorf("problems %v, want one starting with %s", problems, want)
		}
	}
}

func TestParseLargeFileRejected(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "big.yaml", strings.Repeat("#", maxFileSize+1))
	_, _, err := readManifest(dir+"/big.yaml", true)
	if err == nil || !strings.Contains(err.Error(), "larger than 16 MiB") {
		t.Errorf("readManifest of a too large file: %v", err)
	}
}

// readManifest reads regular files, through symlinks too, and never opens
// a device nor blocks on a FIFO, whatever the listing said the name was.
func TestReadManifestOnlyReadsRegularFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", goodPod)
	writeFile(t, dir, "empty.yaml", "")
	for _, l := range [][2]string{{"a.yaml", "link.yaml"}, {"/dev/null", "dev.yaml"}, {"fifo.yaml", "tofifo.yaml"}} {
		if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dir.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want string // "" for errNotManifest
	}{
		{"a.yaml", goodPod}, {"link.yaml", goodPod}, {"empty.yaml", "\x00"},
		{"dev.yaml", ""}, {"fifo.yaml", ""}, {"tofifo.yaml", ""}, {"dir.yaml", ""}, {"missing.yaml", ""},
	} {
		// listed says what the listing saw; true for a name that was a
		// regular file and has been swapped since.
		for _, listed := range []bool{false, true} {
			raw, st, err := readManifest(filepath.Join(dir, tc.name), listed)
			switch {
			case tc.want == "" && !errors.Is(err, errNotManifest):
				t.Errorf("%s (listed regular %v): %q, %v; want not a manifest", tc.name, listed, raw, err)
			case tc.want != "" && (err != nil || st == nil || string(raw) != strings.Trim(tc.want, "\x00")):
				t.Errorf("%s (listed regular %v): %q, %v; want its content", tc.name, listed, raw, err)
			}
		}
	}
}
