package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/volume-agent/volume-agent/internal/status"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the output")

// recordedAt is the since of every volume in testdata/pods.json, recorded
// from the end-to-end test TestCLI.
var recordedAt = time.Date(2026, 11, 23, 20, 8, 41, 0, time.UTC)

// recordedPods returns testdata/pods.json: GET /v1/pods of a real agent.
func recordedPods(t *testing.T) []byte {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", "pods.json"))
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// serve returns the address of a server answering GET path with code and
// body, as a ready agent without source errors answers the rest of
// status's questions (GET /readyz and /v1/sources).
func serve(t *testing.T, path string, code int, body []byte) string {
	t.Helper()
	return serveAll(t, map[string]reply{path: {code, string(body)},
		"/readyz": {http.StatusOK, "ok"}, "/v1/sources": {http.StatusOK, `{"sources": [{"name": "manifests", "synced": true}]}`}})
}

// reply is a status code and a body.
type reply struct {
	code int
	body string
}

// serveAll returns the address of a server answering GET of each path.
func serveAll(t *testing.T, answers map[string]reply) string {
	t.Helper()
	mux := http.NewServeMux()
	for path, a := range answers {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(a.code)
			_, _ = w.Write([]byte(a.body))
		})
	}
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return strings.TrimPrefix(ts.URL, "http://")
}

// cliOutput is what a subcommand printed and its exit code.
type cliOutput struct {
	stdout, stderr string
	code           int
}

// runCmd runs a subcommand with the clock at now.
func runCmd(now time.Time, args ...string) cliOutput {
	var stdout, stderr bytes.Buffer
	code, ok := runSubcommand(args, cmdEnv{stdout: &stdout, stderr: &stderr, now: func() time.Time { return now }})
	if !ok {
		return cliOutput{code: -1, stderr: "not a subcommand"}
	}
	return cliOutput{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it):\n%s\nwant\n%s", path, got, want)
	}
}

// reversed returns pods with the pods and each pod's volumes in reverse
// order, as JSON.
func reversed(t *testing.T, body []byte) []byte {
	t.Helper()
	var answer struct {
		Pods []status.Pod `json:"pods"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		t.Fatal(err)
	}
	slices.Reverse(answer.Pods)
	for _, p := range answer.Pods {
		slices.Reverse(p.Volumes)
	}
	out, err := json.Marshal(answer)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStatusTable: one row per volume, sorted by pod then volume whatever
// the order of the answer, aligned, with ages from since.
func TestStatusTable(t *testing.T) {
	body := recordedPods(t)
	now := recordedAt.Add(3*time.Minute + 12*time.Second)
	for _, tc := range []struct{ output, golden string }{{"table", "status.txt"}, {"wide", "status-wide.txt"}} {
		out := runCmd(now, "status", "--addr", serve(t, "/v1/pods", http.StatusOK, body), "-o", tc.output)
		if out.code != exitOK || out.stderr != "" {
			t.Fatalf("-o %s: exit %d, stderr %q", tc.output, out.code, out.stderr)
		}
		golden(t, tc.golden, out.stdout)
		shuffled := runCmd(now, "status", "--addr", serve(t, "/v1/pods", http.StatusOK, reversed(t, body)), "-o", tc.output)
		if shuffled.stdout != out.stdout {
			t.Errorf("-o %s of the answer in reverse order:\n%s\nwant the same rows:\n%s", tc.output, shuffled.stdout, out.stdout)
		}
	}
}

// TestStatusJSON prints the endpoint's answer byte for byte.
func TestStatusJSON(t *testing.T) {
	body := recordedPods(t)
	out := runCmd(recordedAt, "status", "-o", "json", "--addr", serve(t, "/v1/pods", http.StatusOK, body))
	if out.code != exitOK || out.stdout != string(body) {
		t.Fatalf("exit %d, stdout\n%s\nwant the answer as it is", out.code, out.stdout)
	}
}

func TestBytesIEC(t *testing.T) {
	for n, want := range map[uint64]string{0: "0B", 1023: "1023B", 1024: "1Ki", 1536: "1.5Ki", 5 << 20: "5Mi",
		5<<20 + 300<<10: "5.3Mi", 120 << 30: "120Gi", 8 << 40: "8Ti"} {
		if got := bytesIEC(n); got != want {
			t.Errorf("bytesIEC(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestStatusCutsErrors: an error is one line in the table, cut to
// maxErrorWidth characters, and whole under its row, wrapped; a pod
// without volumes has one row; a volume without since has no age.
func TestStatusCutsErrors(t *testing.T) {
	long := "mount nfs 10.0.0.1:/export:\n  " + strings.Repeat("mount.nfs: Connection timed out ", 6)
	body := `{"pods":[{"uid":"u1","namespace":"ns","name":"nfs","ready":false,"volumes":[{"name":"data","plugin":"kubernetes.io/nfs","path":"","state":"Failed","error":` +
		jsonString(t, long) + `}]},{"uid":"u2","namespace":"ns","name":"bare","ready":true,"volumes":[]}]}`
	addr := serve(t, "/v1/pods", http.StatusOK, []byte(body))
	out := runCmd(recordedAt, "status", "--addr", addr)
	want := "Ready: yes\n" +
		"POD      VOLUME  PLUGIN             STATE   AGE  USED  SIZE  ERROR\n" +
		"ns/bare  <none>  -                  -       -    -     -\n" +
		"ns/nfs   data    kubernetes.io/nfs  Failed  -    -     -     mount nfs 10.0.0.1:/export: mount.nfs: Connection timed out mount.nfs: Connec...\n" +
		"    mount nfs 10.0.0.1:/export: mount.nfs: Connection timed out mount.nfs: Connection timed out\n" +
		"    mount.nfs: Connection timed out mount.nfs: Connection timed out mount.nfs: Connection timed out\n" +
		"    mount.nfs: Connection timed out\n"
	if out.code != exitOK || out.stdout != want {
		t.Fatalf("exit %d, stdout\n%s\nwant\n%s", out.code, out.stdout, want)
	}
	if got := strings.Split(out.stdout, "\n")[3]; len(got) != len("ns/nfs   data    kubernetes.io/nfs  Failed  -    -     -     ")+maxErrorWidth {
		t.Errorf("error cut to %d characters, want %d", len(got)-len("ns/nfs   data    kubernetes.io/nfs  Failed  -    -     -     "), maxErrorWidth)
	}
	// -o wide never cuts: the whole error, on one line.
	wide := runCmd(recordedAt, "status", "--addr", addr, "-o", "wide")
	if whole := strings.Join(strings.Fields(long), " "); !strings.Contains(wide.stdout, whole) {
		t.Errorf("-o wide:\n%s\nwant the whole error %q", wide.stdout, whole)
	}
}

// TestStatusShowsSizeLimitWarning: a volume over its sizeLimit shows its
// warning in the ERROR column.
func TestStatusShowsSizeLimitWarning(t *testing.T) {
	body := `{"pods":[{"uid":"u1","namespace":"ns","name":"big","ready":true,"volumes":[{"name":"scratch","plugin":"kubernetes.io/empty-dir","path":"/p","state":"Mounted","error":"",` +
		`"usage":{"usedBytes":2097152,"capacityBytes":10737418240,"sizeLimitBytes":1048576,"method":"walk"},"sizeLimitExceeded":true,` +
		`"warning":"Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\": 2097152 bytes used"}]}]}`
	out := runCmd(recordedAt, "status", "--addr", serve(t, "/v1/pods", http.StatusOK, []byte(body)), "-o", "wide")
	if want := `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi": 2097152 bytes used`; out.code != exitOK || !strings.Contains(out.stdout, want) {
		t.Fatalf("exit %d, stdout\n%s\nwant the warning %q", out.code, out.stdout, want)
	}
}

// TestStatusReadiness: the line above the table says why the agent is not
// ready, with its sources' errors (a manifest file that does not parse,
// and why), cut in the table and whole with -o wide.
func TestStatusReadiness(t *testing.T) {
	reason := "source manifests is not synced: waiting for files that have not parsed since start: stray.yaml"
	fileErr := `stray.yaml: kind "Deployment" is not served (want Pod, ConfigMap, Secret, PersistentVolume, PersistentVolumeClaim, StorageClass or Node)`
	addr := serveAll(t, map[string]reply{
		"/v1/pods":    {http.StatusOK, `{"pods": [{"uid": "u1", "namespace": "ns", "name": "db", "ready": false, "volumes": []}]}`},
		"/readyz":     {http.StatusServiceUnavailable, reason + "\n"},
		"/v1/sources": {http.StatusOK, `{"sources": [{"name": "manifests", "synced": false, "reason": "x", "errors": [` + jsonString(t, fileErr) + `]}]}`},
	})
	full := "Ready: no: " + reason + "; source errors: manifests: " + fileErr
	out := runCmd(recordedAt, "status", "--addr", addr)
	if first := strings.Split(out.stdout, "\n")[0]; first != cut(full, maxSummaryWidth) || !strings.Contains(first, "stray.yaml") {
		t.Errorf("first line %q, want %q", first, cut(full, maxSummaryWidth))
	}
	wide := runCmd(recordedAt, "status", "--addr", addr, "-o", "wide")
	if first := strings.Split(wide.stdout, "\n")[0]; first != full {
		t.Errorf("-o wide first line %q, want %q", first, full)
	}
	if js := runCmd(recordedAt, "status", "--addr", addr, "-o", "json"); strings.Contains(js.stdout, "Ready:") {
		t.Errorf("-o json has the readiness line: %s", js.stdout)
	}
}

func jsonString(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStatusNoPods(t *testing.T) {
	out := runCmd(recordedAt, "status", "--addr", serve(t, "/v1/pods", http.StatusOK, []byte(`{"pods": []}`)))
	if out.code != exitOK || out.stdout != "Ready: yes\n" || !strings.Contains(out.stderr, "No pods") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 0, the readiness line and No pods on stderr", out.code, out.stdout, out.stderr)
	}
}

func TestStatusFailures(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closedAddr := strings.TrimPrefix(closed.URL, "http://")
	closed.Close()
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"agent not running", []string{"--addr", closedAddr}, exitUnreachable, "cannot reach the agent at http://" + closedAddr},
		{"server error", []string{"--addr", serve(t, "/v1/pods", http.StatusInternalServerError, []byte("boom"))}, exitUnreachable, "unexpected answer to GET /v1/pods: 500 Internal Server Error: boom"},
		{"not JSON", []string{"--addr", serve(t, "/v1/pods", http.StatusOK, []byte("<html>"))}, exitUnreachable, "decode the answer to GET /v1/pods"},
		{"not the pods", []string{"--addr", serve(t, "/v1/pods", http.StatusOK, []byte(`{"claims": []}`))}, exitUnreachable, `no "pods" in it`},
		{"json of not the pods", []string{"-o", "json", "--addr", serve(t, "/v1/pods", http.StatusOK, []byte(`{}`))}, exitUnreachable, `no "pods" in it`},
		{"bad output", []string{"-o", "yaml"}, exitUsage, `-o "yaml": want table, wide or json`},
		{"extra argument", []string{"pods"}, exitUsage, "unexpected arguments: pods"},
		{"addr with a path", []string{"--addr", "http://127.0.0.1:9810/v1"}, exitUsage, "want host:port"},
		{"https addr", []string{"--addr", "https://127.0.0.1:9810"}, exitUsage, "want host:port"},
		{"unknown flag", []string{"--bogus"}, exitUsage, "flag provided but not defined: -bogus"},
		{"help", []string{"--help"}, exitOK, "Exit codes:\n  0  the status was shown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := runCmd(recordedAt, append([]string{"status"}, tc.args...)...)
			if out.code != tc.wantCode || !strings.Contains(out.stderr, tc.wantErr) || out.stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and %q", out.code, out.stdout, out.stderr, tc.wantCode, tc.wantErr)
			}
		})
	}
}

func TestAge(t *testing.T) {
	now := recordedAt
	for _, tc := range []struct {
		ago  time.Duration
		want string
	}{
		{0, "0s"}, {-5 * time.Second, "0s"}, {45 * time.Second, "45s"}, {119 * time.Second, "119s"},
		{3*time.Minute + 12*time.Second, "3m12s"}, {25 * time.Minute, "25m"}, {179 * time.Minute, "179m"},
		{5*time.Hour + 3*time.Minute, "5h3m"}, {20 * time.Hour, "20h"}, {75 * time.Hour, "3d3h"}, {12 * 24 * time.Hour, "12d"},
	} {
		if got := age(now, now.Add(-tc.ago)); got != tc.want {
			t.Errorf("age of %v = %q, want %q", tc.ago, got, tc.want)
		}
	}
	if got := age(now, time.Time{}); got != "-" {
		t.Errorf("age without since = %q, want -", got)
	}
}

// TestStatusShowsWhyAPodIsHeld: a pod found on disk whose removal does
// not count yet shows its reason on each of its volumes' rows.
func TestStatusShowsWhyAPodIsHeld(t *testing.T) {
	body := []byte(`{"pods":[{"uid":"u1","namespace":"default","name":"web","state":"Held",` +
		`"reason":"found on disk at start and not in its source; kept as it is, because its removal does not count yet: the manifests list nothing",` +
		`"volumes":[{"name":"data","plugin":"kubernetes.io/empty-dir","path":"/root/pods/u1/volumes/kubernetes.io~empty-dir/data","state":"Held"}]}]}`)
	out := runCmd(recordedAt, "status", "--addr", serve(t, "/v1/pods", http.StatusOK, body), "-o", "wide")
	if out.code != exitOK || !strings.Contains(out.stdout, "Held") || !strings.Contains(out.stdout, "the manifests list nothing") {
		t.Fatalf("exit %d, stdout:\n%s\nwant the volume Held with its pod's reason", out.code, out.stdout)
	}
}

// TestStatusShowsLongReasonsWhole: a reason whose cause and fix come
// hundreds of characters in (btrfs quotas off, behind a claim's binding
// reasons; a claim deleted while its pod runs) is shown whole under its
// row, wrapped at 100 columns, so that the table says what to do; one
// longer than 8 lines keeps its first line and its end.
func TestStatusShowsLongReasonsWhole(t *testing.T) {
	fix := "btrfs quotas are off on the local path root /var/lib/volume-agent/local: " +
		"turn them on (btrfs quota enable /var/lib/volume-agent/local) to enforce volume sizes"
	var checked []string
	for _, pv := range []string{"pv-a", "pv-b", "pv-c"} {
		checked = append(checked, pv+`: node affinity check failed: its spec.nodeAffinity does not match node "node-1"`)
	}
	quotas := "waiting: claim default/data is not bound yet: no PersistentVolume fits claim default/data (3 checked: " +
		strings.Join(checked, "; ") + `); StorageClass "enforced" cannot provision it: ` + fix
	deleted := "claim default/data removed from the manifests but not released: a pod that is not terminated still names it; " +
		"the volume stays set up as it is while this pod runs, and is released when the pod ends"
	huge := "mount nfs 10.0.0.1:/export: " + strings.Repeat("mount.nfs: Connection timed out ", 40) + "check that the server answers"
	vol := func(name, state, msg string) string {
		return `{"name":"` + name + `","plugin":"p","path":"","state":"` + state + `","error":` + jsonString(t, msg) + `}`
	}
	body := `{"pods":[{"uid":"u1","namespace":"default","name":"db","ready":false,"volumes":[` +
		vol("a-quotas", "Pending", quotas) + "," + vol("b-deleted", "Mounted", deleted) + "," + vol("c-huge", "Failed", huge) + `]}]}`
	out := runCmd(recordedAt, "status", "--addr", serve(t, "/v1/pods", http.StatusOK, []byte(body)))
	if out.code != exitOK {
		t.Fatalf("exit %d: %s", out.code, out.stderr)
	}
	under := reasonsUnderRows(out.stdout)
	for name, want := range map[string]string{"a-quotas": quotas, "b-deleted": deleted} {
		if got := under[name]; got != want {
			t.Errorf("under the row of %s: %q; want the whole reason %q\n%s", name, got, want, out.stdout)
		}
	}
	if got := under["c-huge"]; !strings.HasPrefix(got, "mount nfs 10.0.0.1:/export: ") || !strings.HasSuffix(got, "check that the server answers") ||
		!strings.Contains(got, " ... ") {
		t.Errorf("under the row of c-huge: %q; want its first line and its end", got)
	}
	lines := 0
	for _, line := range strings.Split(out.stdout, "\n") {
		if !strings.HasPrefix(line, tableIndent) {
			if lines > 8 {
				t.Errorf("%d reason lines under a row, want at most 8", lines)
			}
			lines = 0
			continue
		}
		lines++
		if len(line) > len(tableIndent)+100 {
			t.Errorf("line %q longer than 100 characters", line)
		}
	}
}

// tableIndent begins each line of a reason shown under its row.
const tableIndent = "    "

// reasonsUnderRows returns the reason lines under each row of a status
// table, joined, by volume.
func reasonsUnderRows(table string) map[string]string {
	out := map[string]string{}
	var volume string
	for _, line := range strings.Split(table, "\n") {
		if rest, ok := strings.CutPrefix(line, tableIndent); ok {
			out[volume] = strings.TrimSpace(out[volume] + " " + rest)
			continue
		}
		if f := strings.Fields(line); len(f) > 1 {
			volume = f[1]
		}
	}
	return out
}
