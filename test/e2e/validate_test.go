package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// cachePod has a memory-backed emptyDir with a size limit and a configMap
// volume; its ConfigMap is in the same file. sizeLimit is the name the
// file gives the field (a typo, say), mode the ConfigMap's value.
const cachePod = `apiVersion: v1
kind: Pod
metadata: {name: cache}
spec:
  containers:
  - name: main
    image: busybox
  volumes:
  - name: cache
    emptyDir:
      medium: Memory
      %s: 16Mi
  - name: settings
    configMap: {name: settings}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {mode: %s}
`

// TestValidateCommand runs volume-agent validate on a directory with good
// and bad files: one line per problem with the file, the line and the
// field, exit code 1; once fixed, the summary and exit code 0.
func TestValidateCommand(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cache.yaml", fmt.Sprintf(cachePod, "sizeLimit", "fast"))
	write("config.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {level: info}\n")
	typo := strings.Replace(fmt.Sprintf(cachePod, "sizeLimt", "fast"), "name: cache}", "name: typo}", 1)
	write("typo.yaml", typo[:strings.Index(typo, "---")]) // the pod alone
	write("types.json", `{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "types"},
 "spec": {"containers": [{"name": "main", "image": "busybox",
   "ports": [{"containerPort": "80"}]}],
   "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Gb"}}]}}`)
	write("syntax.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: broken\n data: {}\n")
	write("notes.txt", "not a manifest: not read")

	run := runCLI(t, "validate", dir)
	want := []string{
		filepath.Join(dir, "syntax.yaml") + ":5: invalid YAML: did not find expected key",
		filepath.Join(dir, "types.json") + `:3: spec.containers[0].ports[0].containerPort: want an integer, got a string`,
		filepath.Join(dir, "types.json") + `:4: spec.volumes[0].emptyDir.sizeLimit: invalid quantity "1Gb": want a number with an optional unit, such as 1Gi, 512Mi, 1G or 500m`,
		filepath.Join(dir, "typo.yaml") + ":12: spec.volumes[0].emptyDir.sizeLimt: unknown field (did you mean sizeLimit?)",
	}
	if got := strings.Split(strings.TrimSuffix(run.stdout, "\n"), "\n"); run.code != 1 || !slices.Equal(got, want) || run.stderr != "" {
		t.Errorf("exit %d, stdout\n%s\nstderr %s\nwant exit 1 and\n%s", run.code, run.stdout, run.stderr, strings.Join(want, "\n"))
	}

	for _, name := range []string{"syntax.yaml", "types.json", "typo.yaml"} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	run = runCLI(t, "validate", dir)
	if want := dir + ": 2 files, 3 objects, no problems\n"; run.code != 0 || run.stdout != want {
		t.Errorf("exit %d, stdout %q; want 0 and %q", run.code, run.stdout, want)
	}

	for _, args := range [][]string{{"validate"}, {"validate", dir, dir}, {"validate", filepath.Join(dir, "nope")}} {
		if run := runCLI(t, args...); run.code != 2 || run.stdout != "" || !strings.HasPrefix(run.stderr, "volume-agent validate: ") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and the reason on stderr", args, run.code, run.stdout, run.stderr)
		}
	}
	if run := runCLI(t, "validate", "--help"); run.code != 0 || !strings.Contains(run.stderr, "Exit codes:") {
		t.Errorf("validate --help: exit %d, stderr %s", run.code, run.stderr)
	}
}

// TestTypoedFieldKeepsLastGoodContent: an agent whose manifest gets a
// misspelt field (sizeLimt) rejects the file whole: the ConfigMap edited in
// the same file keeps its old content, /v1/sources names the file, line and
// field as volume-agent validate does, and after a restart with the typo
// still there the source waits for the file and nothing is torn down.
func TestTypoedFieldKeepsLastGoodContent(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("cache.yaml", fmt.Sprintf(cachePod, "sizeLimit", "v1"))
	a.start()
	p := a.waitPod("default", "cache", 10*time.Second, ready)
	mode := filepath.Join(p.volume("settings").Path, "mode")
	checkFile(t, mode, "v1")
	checkTmpfs(t, p.volume("cache").Path, "size=16384k")

	a.writeManifest("cache.yaml", fmt.Sprintf(cachePod, "sizeLimt", "v2"))
	wantErr := "cache.yaml:12: spec.volumes[0].emptyDir.sizeLimt: unknown field (did you mean sizeLimit?) (document 1, Pod/cache)"
	waitFor(t, 5*time.Second, "the typo reported by /v1/sources", func() (bool, string) {
		errs := a.sourceErrors()
		return slices.Equal(errs, []string{wantErr}), fmt.Sprint(errs)
	})
	run := runCLI(t, "validate", a.manifests)
	if want := filepath.Join(a.manifests, wantErr) + "\n"; run.code != 1 || run.stdout != want {
		t.Errorf("validate: exit %d, stdout %q; want 1 and %q", run.code, run.stdout, want)
	}
	time.Sleep(time.Second) // past the settle delay: a wrong update would have run
	checkFile(t, mode, "v1")
	if now, _ := a.pod("default", "cache"); !now.Ready {
		t.Errorf("pod not ready after the typo: %+v", now)
	}
	if code, body := a.get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d %s: the file parsed since start, so the source stays synced", code, body)
	}

	// A restart finds the typo: the file never parsed since this start, so
	// the source is not synced and the volumes found on disk stay.
	a.restart(false)
	waitFor(t, 5*time.Second, "the source waiting for cache.yaml", func() (bool, string) {
		code, body := a.get("/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "cache.yaml"), body
	})
	time.Sleep(time.Second)
	checkFile(t, mode, "v1")
	checkTmpfs(t, p.volume("cache").Path, "size=16384k")

	a.writeManifest("cache.yaml", fmt.Sprintf(cachePod, "sizeLimit", "v2"))
	waitFor(t, 5*time.Second, "the fixed file's content", func() (bool, string) {
		got, err := os.ReadFile(mode)
		return string(got) == "v2", fmt.Sprint(string(got), err)
	})
	waitFor(t, 5*time.Second, "/readyz", func() (bool, string) {
		code, body := a.get("/readyz")
		return code == http.StatusOK && len(a.sourceErrors()) == 0, body
	})
}

// sourceErrors returns the errors of the manifest source in /v1/sources.
func (a *agent) sourceErrors() []string {
	a.t.Helper()
	_, body := a.get("/v1/sources")
	var out struct {
		Sources []struct {
			Name   string   `json:"name"`
			Errors []string `json:"errors"`
		} `json:"sources"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		a.t.Fatalf("/v1/sources: %v: %s", err, body)
	}
	for _, s := range out.Sources {
		if s.Name == "manifests" {
			return s.Errors
		}
	}
	return nil
}
