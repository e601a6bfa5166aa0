package manifest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// FuzzSecretNotInProblems puts an arbitrary value in a Secret or a
// ConfigMap (stringData, data, binaryData, as text or base64), in a YAML
// or a JSON document that has one of a set of defects, and checks that no
// problem quotes the value or its base64 form: ConfigMap and Secret content
// must never reach a log line or a status error.
// Seeds: the f.Add calls and testdata/fuzz/FuzzSecretNotInProblems.
func FuzzSecretNotInProblems(f *testing.F) {
	for i := range len(placements) * len(defects) * 3 {
		f.Add("s3cr3t-Value", uint8(i))
	}
	f.Add("12345", uint8(2))
	f.Add("true", uint8(5))
	f.Add("[a, b]", uint8(7))
	f.Fuzz(func(t *testing.T, value string, choice uint8) {
		placement := placements[int(choice)%len(placements)]
		defect := defects[int(choice)/len(placements)%len(defects)]
		format := int(choice) / (len(placements) * len(defects)) % 3
		const placeholder = "PLACEHOLDER"
		name, doc := secretDocument(placement, defect, format, value)
		_, withValue := newParser("node-1").parseFile(name, []byte(doc))
		_, placeholderDoc := secretDocument(placement, defect, format, placeholder)
		_, withPlaceholder := newParser("node-1").parseFile(name, []byte(placeholderDoc))
		ours := placeholderDoc + formatAll(withPlaceholder, name)
		for _, secret := range []string{value, base64.StdEncoding.EncodeToString([]byte(value))} {
			// A value that our own words, or the rest of the document,
			// hold anyway ("Secret", "1") says nothing.
			if len(secret) < 4 || strings.Contains(ours, secret) {
				continue
			}
			if msgs := formatAll(withValue, name); strings.Contains(msgs, secret) {
				t.Fatalf("a problem quotes the content %q:\n%s\ndocument:\n%s", secret, msgs, doc)
			}
		}
	})
}

// placement is where the value goes: kind, field, and whether it is
// written base64-encoded.
type placement struct {
	kind, field string
	encode      bool
}

// placements are the placements tried.
var placements = []placement{
	{"Secret", "stringData", false},
	{"Secret", "data", true},
	{"Secret", "data", false}, // most values are no base64
	{"ConfigMap", "data", false},
	{"ConfigMap", "binaryData", true},
	{"ConfigMap", "binaryData", false},
}

// defects are top-level fields added to the object, each wrong in a way
// of its own; the first is none.
var defects = []map[string]any{
	nil,
	{"unknwn": 1},
	{"immutable": "maybe"},
	{"type": 12},
	{"metadata": map[string]any{"name": "Not_A_Name"}},
	{"metadata": map[string]any{"name": "s", "uid": 5}},
	{"data": map[string]any{"other": []any{1}}},
	{"kind": "Secrets"},
	{"apiVersion": "v2"},
	{"metadata": map[string]any{"name": "s", "creationTimestamp": "yesterday"}},
}

// secretDocument writes the object as a YAML block, a YAML flow mapping
// or a JSON file (format 0, 1, 2), with the defect's fields after its own.
func secretDocument(placement placement, defect map[string]any, format int, value string) (string, string) {
	if placement.encode {
		value = base64.StdEncoding.EncodeToString([]byte(value))
	}
	fields := [][2]any{
		{"apiVersion", "v1"}, {"kind", placement.kind}, {"metadata", map[string]any{"name": "s"}},
		{placement.field, map[string]any{"k": value}},
	}
	for k, v := range defect {
		fields = append(fields, [2]any{k, v})
	}
	var b strings.Builder
	name := "f.yaml"
	switch format {
	case 0:
		for _, f := range fields {
			fmt.Fprintf(&b, "%s: %s\n", f[0], mustJSON(f[1]))
		}
	default:
		if format == 2 {
			name = "f.json"
		}
		b.WriteString("{")
		for i, f := range fields {
			if i > 0 {
				b.WriteString(",\n")
			}
			fmt.Fprintf(&b, "%s: %s", mustJSON(f[0]), mustJSON(f[1]))
		}
		b.WriteString("}\n")
	}
	return name, b.String()
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
