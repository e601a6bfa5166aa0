package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// brokenPod cannot be ready: its ConfigMap does not exist and csi is not
// supported.
const brokenPod = `
apiVersion: v1
kind: Pod
metadata: {name: broken, namespace: team, uid: broken-1}
spec:
  containers: [{name: main, image: busybox}]
  volumes:
  - name: settings
    configMap: {name: no-such-config}
  - name: data
    csi: {driver: example.com/disk}
`

// latePod is ready once its ConfigMap appears.
const latePod = `
apiVersion: v1
kind: Pod
metadata: {name: late, namespace: team, uid: late-1}
spec:
  containers: [{name: main, image: busybox}]
  volumes:
  - name: settings
    configMap: {name: late-config}
`

const lateConfig = `
apiVersion: v1
kind: ConfigMap
metadata: {name: late-config, namespace: team}
data: {mode: fast}
`

// cliRun is the outcome of one run of the CLI.
type cliRun struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

// runCLI runs the built binary with args and returns what it printed and
// its exit code.
func runCLI(t *testing.T, args ...string) cliRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	run := cliRun{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		run.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("volume-agent %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("$ volume-agent %s  # exit %d\n%s%s", strings.Join(args, " "), run.code, run.stdout, run.stderr)
	return run
}

// TestCLI runs status, wait and version against a real agent.
func TestCLI(t *testing.T) {
	a, app, _ := startApp(t)
	a.writeManifest("broken.yaml", brokenPod)
	a.writeManifest("late.yaml", latePod)
	a.waitPod("team", "broken", 10*time.Second, func(p apiPod) bool { return p.volume("settings").State == "Failed" })
	addr := "--addr=" + a.addr

	t.Run("status", func(t *testing.T) {
		r := runCLI(t, "status", addr)
		if r.code != 0 {
			t.Fatalf("exit %d, want 0", r.code)
		}
		lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
		// The readiness line first: the agent is ready; a missing ConfigMap
		// is a volume's problem, not a source's.
		if lines[0] != "Ready: yes" {
			t.Errorf("readiness line %q, want Ready: yes", lines[0])
		}
		lines = lines[1:]
		if got := strings.Fields(lines[0]); strings.Join(got, " ") != "POD VOLUME PLUGIN STATE AGE USED SIZE ERROR" {
			t.Fatalf("header %q", lines[0])
		}
		// Sorted by namespace/name, then volume; one row per volume.
		wantRows := []string{
			"default/app all kubernetes.io/projected Mounted",
			"default/app cache kubernetes.io/empty-dir Mounted",
			"default/app config kubernetes.io/configmap Mounted",
			"default/app creds kubernetes.io/secret Mounted",
			"default/app host kubernetes.io/host-path Mounted",
			"default/app info kubernetes.io/downward-api Mounted",
			"default/app scratch kubernetes.io/empty-dir Mounted",
			"team/broken data - Unsupported",
			"team/broken settings kubernetes.io/configmap Failed",
			"team/late settings kubernetes.io/configmap",
		}
		if len(lines) != len(wantRows)+1 {
			t.Fatalf("%d rows, want %d:\n%s", len(lines)-1, len(wantRows), r.stdout)
		}
		age := regexp.MustCompile(`^\d+s$`)
		for i, want := range wantRows {
			f := strings.Fields(lines[i+1])
			if !strings.HasPrefix(strings.Join(f, " "), want) {
				t.Errorf("row %d = %q, want it to start with %q", i, lines[i+1], want)
			}
			if len(f) < 5 || !age.MatchString(f[4]) {
				t.Errorf("row %d = %q: no age in seconds", i, lines[i+1])
			}
		}
		if !strings.Contains(lines[9], "configMap") || !strings.Contains(lines[8], "csi") {
			t.Errorf("the errors of team/broken are not shown:\n%s", r.stdout)
		}
	})

	t.Run("status -o wide", func(t *testing.T) {
		r := runCLI(t, "status", addr, "-o", "wide")
		lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")[1:] // after the readiness line
		if r.code != 0 || len(lines) != 11 {
			t.Fatalf("exit %d, %d lines; want 0 and a header and 10 rows", r.code, len(lines))
		}
		if f := strings.Fields(lines[1]); len(f) < 9 || f[1] != app.UID || f[8] != app.volume("all").Path {
			t.Errorf("row %q: want the pod's UID and the volume's path", lines[1])
		}
	})

	t.Run("status -o json", func(t *testing.T) {
		r := runCLI(t, "status", addr, "-o", "json")
		if r.code != 0 {
			t.Fatalf("exit %d, want 0", r.code)
		}
		var got struct{ Pods []apiPod }
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("not the endpoint's JSON: %v\n%s", err, r.stdout)
		}
		var uids []string
		for _, p := range got.Pods {
			uids = append(uids, p.UID)
		}
		if want := app.UID + " broken-1 late-1"; strings.Join(uids, " ") != want {
			t.Errorf("pods %v, want %s", uids, want)
		}
		if !strings.Contains(r.stdout, `"since": "`) {
			t.Errorf("no since in the JSON:\n%s", r.stdout)
		}
	})

	t.Run("wait ready pod", func(t *testing.T) {
		r := runCLI(t, "wait", app.UID, addr, "--timeout", "10s")
		if r.code != 0 || !strings.Contains(r.stdout, "default/app") {
			t.Fatalf("exit %d, want 0 with the pod named", r.code)
		}
	})

	t.Run("wait until ready", func(t *testing.T) {
		done := make(chan cliRun, 1)
		go func() { done <- runCLI(t, "wait", "late-1", addr, "--timeout", "30s") }()
		time.Sleep(300 * time.Millisecond) // the request is waiting
		a.writeManifest("late-config.yaml", lateConfig)
		r := <-done
		if r.code != 0 || r.took > 15*time.Second {
			t.Fatalf("exit %d after %v, want 0 soon after the ConfigMap came", r.code, r.took)
		}
	})

	t.Run("wait times out", func(t *testing.T) {
		r := runCLI(t, "wait", "broken-1", addr, "--timeout", "1s")
		if r.code != 1 || !strings.Contains(r.stderr, "settings: Failed:") || !strings.Contains(r.stderr, "data: Unsupported:") {
			t.Fatalf("exit %d, want 1 naming the volumes that are not ready", r.code)
		}
		if r.took < time.Second {
			t.Errorf("gave up after %v, before --timeout", r.took)
		}
	})

	t.Run("wait unknown pod", func(t *testing.T) {
		r := runCLI(t, "wait", "no-such-uid", addr, "--timeout", "1s")
		if r.code != 4 || !strings.Contains(r.stderr, "does not know pod no-such-uid") {
			t.Fatalf("exit %d, want 4 saying the pod is unknown", r.code)
		}
	})

	t.Run("agent unreachable", func(t *testing.T) {
		for _, args := range [][]string{{"status"}, {"wait", app.UID, "--timeout", "1s"}} {
			r := runCLI(t, append(args, "--addr", freeAddr(t))...)
			if r.code != 3 || !strings.Contains(r.stderr, "cannot reach the agent") {
				t.Errorf("%v: exit %d, want 3 saying the agent cannot be reached", args, r.code)
			}
		}
	})

	t.Run("version", func(t *testing.T) {
		r := runCLI(t, "version")
		if r.code != 0 {
			t.Fatalf("exit %d, want 0", r.code)
		}
		// Columns are aligned to the longest label, which depends on
		// whether the build has VCS information (a commit time).
		fields := map[string]string{}
		for _, line := range strings.Split(r.stdout, "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				fields[k] = strings.TrimSpace(v)
			}
		}
		if fields["version"] == "" || fields["revision"] == "" || fields["go"] != runtime.Version() {
			t.Errorf("version fields %v; want version, revision and go %s", fields, runtime.Version())
		}
	})
}
