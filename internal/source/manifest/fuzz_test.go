package manifest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzParseFile decodes arbitrary bytes as a manifest file, YAML or JSON.
// It must never panic; every problem must name the file and a line within
// it; the same bytes must give the same result; and an accepted object
// must round-trip: encoded as JSON and parsed again, it gives itself (same
// key, same content) without a problem.
// Seeds: the f.Add calls, the files of testdata/ and
// testdata/fuzz/FuzzParseFile.
func FuzzParseFile(f *testing.F) {
	for _, name := range []string{"all-kinds.yaml", "list.yaml", "pod.json"} {
		raw, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw, strings.HasSuffix(name, ".json"))
	}
	f.Add([]byte("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {k: v}\ndata: {k: 12}\n"), false)
	f.Add([]byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  uid: ../x\nspec: {containers: []}\n"), false)
	f.Add([]byte("{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [{\"kind\": \"List\"}, 3]}"), true)
	f.Add([]byte("---\n- a\n---\n{a: 1, a: 2}\n--- # c\n\tkind: x\n"), false)
	f.Fuzz(func(t *testing.T, raw []byte, isJSON bool) {
		name := "dir/file.yaml"
		if isJSON {
			name = "dir/file.json"
		}
		p := newParser("node-1")
		objs, problems := p.parseFile(filepath.Base(name), raw)
		lines := bytes.Count(raw, []byte("\n")) + 1
		for _, pr := range problems {
			msg := pr.format(name)
			if !strings.HasPrefix(msg, name+":") || pr.msg == "" {
				t.Fatalf("problem %q does not name the file %s", msg, name)
			}
			if pr.line < 0 || pr.line > lines {
				t.Fatalf("problem %q at line %d of a file of %d lines", msg, pr.line, lines)
			}
		}
		again, problemsAgain := p.parseFile(filepath.Base(name), raw)
		if len(again) != len(objs) || formatAll(problemsAgain, name) != formatAll(problems, name) {
			t.Fatalf("parsing the same bytes twice differs: %q, then %q", formatAll(problems, name), formatAll(problemsAgain, name))
		}
		if len(problems) > 0 {
			return
		}
		for _, o := range objs {
			checkAccepted(t, o)
			roundTrip(t, p, o)
		}
	})
}

func formatAll(problems []problem, name string) string {
	var out []string
	for _, pr := range problems {
		out = append(out, pr.format(name))
	}
	return strings.Join(out, "\n")
}

// checkAccepted checks what normalize promises of an accepted object.
func checkAccepted(t *testing.T, o object) {
	t.Helper()
	if _, ok := apiVersionOf[o.key.kind]; !ok {
		t.Fatalf("accepted an object of kind %q", o.key.kind)
	}
	if msgs := validation.IsDNS1123Subdomain(o.key.name); len(msgs) > 0 {
		t.Fatalf("accepted %s with an invalid name: %v", o.key, msgs)
	}
	if namespaced[o.key.kind] != (o.key.namespace != "") {
		t.Fatalf("accepted %s with namespace %q", o.key, o.key.namespace)
	}
	if pod, ok := o.obj.(*v1.Pod); ok && !isSafeUID(string(pod.UID)) {
		t.Fatalf("accepted pod %s with UID %q, which is no safe directory name", o.key, pod.UID)
	}
}

// roundTrip encodes o as JSON, parses it again, and wants the same object.
func roundTrip(t *testing.T, p *parser, o object) {
	t.Helper()
	js, err := json.Marshal(o.obj)
	if err != nil {
		t.Fatalf("encode %s: %v", o.key, err)
	}
	objs, problems := p.parseFile("again.json", js)
	if len(problems) > 0 || len(objs) != 1 {
		t.Fatalf("%s encoded as %s parses again with problems %q into %d objects", o.key, js, formatAll(problems, "again.json"), len(objs))
	}
	if got := objs[0]; got.key != o.key || !bytes.Equal(content(t, got), content(t, o)) {
		t.Fatalf("%s encoded as %s parses again as %s, encoded as %s", o.key, js, got.key, content(t, got))
	}
}

// content is o encoded as JSON without its resourceVersion, which hashes
// the bytes o was parsed from.
func content(t *testing.T, o object) []byte {
	t.Helper()
	obj := o.obj.DeepCopyObject()
	obj.(metav1.Object).SetResourceVersion("")
	js, err := json.Marshal(obj)
	if err != nil {
		t.Fatalf("encode %s: %v", o.key, err)
	}
	return js
}
