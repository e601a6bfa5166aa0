package contentdir

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestProject(t *testing.T) {
	data := map[string][]byte{"a": []byte("1"), "b": []byte("2")}
	mode := int32(0o600)
	tests := []struct {
		name     string
		items    []v1.KeyToPath
		optional bool
		want     map[string]string // path -> content
		err      string
	}{
		{name: "every key", want: map[string]string{"a": "1", "b": "2"}},
		{name: "items map keys to paths", items: []v1.KeyToPath{{Key: "a", Path: "x/y"}}, want: map[string]string{"x/y": "1"}},
		{name: "missing key fails", items: []v1.KeyToPath{{Key: "c", Path: "c"}}, err: `has no key "c"`},
		{name: "missing key skipped when optional", items: []v1.KeyToPath{{Key: "c", Path: "c"}, {Key: "a", Path: "a"}}, optional: true, want: map[string]string{"a": "1"}},
		{name: "two items on one path fail", items: []v1.KeyToPath{{Key: "a", Path: "p"}, {Key: "b", Path: "p", Mode: &mode}}, err: `two items write path "p"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Project("configMap ns/cm", data, tt.items, 0o644, tt.optional)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("payload has %d files, want %d", len(got), len(tt.want))
			}
			for path, content := range tt.want {
				if string(got[path].Data) != content {
					t.Errorf("%s = %q, want %q", path, got[path].Data, content)
				}
			}
		})
	}
}
