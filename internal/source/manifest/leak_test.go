package manifest

import (
	"fmt"
	"strings"
	"testing"
)

// secretHead starts a Secret manifest.
const secretHead = "apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\n"

// leakyFiles are broken (or valid) Secrets and ConfigMaps whose values must
// never show up in a status error or a log line. Every value contains
// "S3CR3T" or one of the numbers in secretNumbers.
var leakyFiles = map[string]string{
	"01-valid.yaml":        secretHead + "data: {a: UzNDUjNULWI2NA==}\nstringData: {b: S3CR3T-valid}\n",
	"02-number.yaml":       secretHead + "data: {pin: 4815162342}\n",
	"03-base64.yaml":       secretHead + "data: {token: \"S3CR3T-notb64!\"}\n",
	"04-syntax.yaml":       secretHead + "stringData:\n  pw: \"S3CR3T-unterminated\n",
	"05-mapkey.yaml":       secretHead + "stringData:\n  ? [S3CR3T-key]\n  : S3CR3T-mapval\n",
	"06-dupkey.yaml":       strings.Replace(secretHead, "creds", "dup", 1) + "stringData: {a: S3CR3T-dup1, a: S3CR3T-dup2}\n",
	"07-nokind.yaml":       "apiVersion: v1\nmetadata: {name: s}\nstringData: {pw: S3CR3T-nokind}\n",
	"08-badmeta.yaml":      strings.Replace(secretHead, "{name: creds}", "{name: creds, labels: [x]}", 1) + "stringData: {pw: S3CR3T-meta}\n",
	"09-configmap.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {k: 271828182, j: S3CR3T-cm}\n",
	"10-nested.yaml":       secretHead + "stringData: {pw: {S3CR3T-nested: x}}\n",
	"11-list.yaml":         "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Secret, metadata: {name: l}, data: {k: S3CR3T-list}}\n",
	"12-duplicate.yaml":    secretHead + "stringData: {pw: S3CR3T-duplicate}\n",
	"13-typo.yaml":         strings.Replace(secretHead, "kind: Secret", "kind: Secert", 1) + "stringData: {pw: S3CR3T-typo}\n",
	"14-wrongtype.json":    `{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "j"}, "data": {"k": 31415926535}}`,
	"15-binarydata.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\nbinaryData: {k: S3CR3T-bin}\n",
	"16-badtype.yaml":      secretHead + "type: [S3CR3T-type]\n",
	"17-unknownfield.yaml": strings.Replace(secretHead, "creds", "unknown", 1) + "strngData: {pw: S3CR3T-unknown}\n",
}

var secretNumbers = []string{"4815162342", "271828182", "31415926535"}

func TestSecretValuesNeverLeak(t *testing.T) {
	dir := t.TempDir()
	for name, content := range leakyFiles {
		writeFile(t, dir, name, content)
	}
	h := start(t, dir)
	st := h.src.Status()
	// Every file but the valid one has a problem.
	if len(st.Errors) != len(leakyFiles)-1 {
		t.Errorf("got %d errors, want %d:\n%s", len(st.Errors), len(leakyFiles)-1, strings.Join(st.Errors, "\n"))
	}
	var lines []string
	lines = append(lines, st.Errors...)
	lines = append(lines, st.Reason)
	for _, e := range h.logs.All() {
		lines = append(lines, e.Message+" "+fmt.Sprint(e.ContextMap()))
	}
	for _, line := range lines {
		for _, secret := range append([]string{"S3CR3T", "UzNDUjNU"}, secretNumbers...) {
			if strings.Contains(line, secret) {
				t.Errorf("secret value %q leaked: %s", secret, line)
			}
		}
	}
	if testing.Verbose() {
		t.Logf("errors:\n%s", strings.Join(st.Errors, "\n"))
	}
}
