package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// statusPod is a pod of /v1/pods with its state and reason.
type statusPod struct {
	apiPod
	State  string `json:"state"`
	Reason string `json:"reason"`
}

// podByUID returns /v1/pods/{uid}, and the status code.
func (a *agent) statusPod(uid string) (statusPod, int) {
	a.t.Helper()
	code, body := a.get("/v1/pods/" + uid)
	var p statusPod
	if code == http.StatusOK {
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			a.t.Fatalf("/v1/pods/%s: %v: %s", uid, err, body)
		}
	}
	return p, code
}

// metric returns the value of an unlabelled sample (or of name{labels})
// of /metrics.
func (a *agent) metric(sample string) float64 {
	a.t.Helper()
	code, body := a.get("/metrics")
	if code != http.StatusOK {
		a.t.Fatalf("/metrics = %d", code)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				a.t.Fatalf("/metrics: %s: %v", line, err)
			}
			return f
		}
	}
	a.t.Fatalf("/metrics has no sample %s", sample)
	return 0
}

// checkLogLines checks that every line the agent wrote is one JSON entry:
// no message, error or tool output spills onto a line of its own.
func (a *agent) checkLogLines() {
	a.t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(a.logs.String()), "\n") {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			a.t.Errorf("a log line that is not one entry: %q", line)
		}
	}
}

const stuckPod = `
apiVersion: v1
kind: Pod
metadata: {name: stuck, namespace: team}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: data, emptyDir: {}}
  - {name: cache, emptyDir: {}}
`

// TestStuckTeardownIsShown: a pod deleted while a bind mount sits inside
// one of its volumes (as a runtime or a Bidirectional container makes one)
// cannot be torn down. It stays in /v1/pods as Terminating with the reason
// naming the mount points that remain, its stuck volume Terminating with
// the error, the metrics count it, and the log says so at warn level with
// the pod's namespace/name and volume; once the bind mount is gone it is
// torn down, leaves /v1/pods and the metrics, and the log says so at info.
func TestStuckTeardownIsShown(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("pod.yaml", stuckPod)
	a.start()
	p := a.waitPod("team", "stuck", 10*time.Second, ready)
	nested := filepath.Join(p.volume("data").Path, "mnt")
	if err := os.Mkdir(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "keep"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "--bind", src, nested).CombinedOutput(); err != nil {
		t.Fatalf("bind mount: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", nested).Run() })
	if got := a.metric("volume_agent_terminating_pods"); got != 0 {
		t.Fatalf("volume_agent_terminating_pods = %v before the deletion", got)
	}

	a.removeManifest("pod.yaml")
	var stuck statusPod
	waitFor(t, 15*time.Second, "the pod Terminating with the reason", func() (bool, string) {
		var code int
		stuck, code = a.statusPod(p.UID)
		return code == http.StatusOK && stuck.State == "Terminating" && strings.Contains(stuck.Reason, "mount points remain"),
			fmt.Sprintf("%d %+v", code, stuck)
	})
	if stuck.Namespace != "team" || stuck.Name != "stuck" || stuck.Ready {
		t.Errorf("terminating pod = %+v, want team/stuck, not ready", stuck)
	}
	if !strings.Contains(stuck.Reason, `teardown of volume "data" failed`) || !strings.Contains(stuck.Reason, nested) {
		t.Errorf("reason %q does not name the volume and the mount point that remains (%s)", stuck.Reason, nested)
	}
	waitFor(t, 10*time.Second, "the other volume torn down", func() (bool, string) {
		stuck, _ = a.statusPod(p.UID)
		return len(stuck.Volumes) == 1, fmt.Sprintf("%+v", stuck.Volumes)
	})
	if v := stuck.Volumes[0]; v.Name != "data" || v.State != "Terminating" || v.Path != p.volume("data").Path || !strings.Contains(v.Error, "mount points remain") {
		t.Errorf("stuck volume = %+v", v)
	}
	listed := false
	for _, q := range a.pods() {
		listed = listed || q.UID == p.UID
	}
	if !listed {
		t.Error("the terminating pod is missing from /v1/pods")
	}
	for sample, want := range map[string]float64{
		"volume_agent_terminating_pods":             1,
		"volume_agent_stuck_teardowns":              1,
		`volume_agent_volumes{state="Terminating"}`: 1,
		`volume_agent_volumes{state="Mounted"}`:     0,
		`volume_agent_operations_total{operation="teardown",outcome="success",plugin="kubernetes.io/empty-dir"}`: 1,
	} {
		if got := a.metric(sample); got != want {
			t.Errorf("%s = %v, want %v", sample, got, want)
		}
	}
	failed := a.logLines(t, "volume teardown failed", map[string]string{"level": "warn", "pod": "team/stuck", "podUID": p.UID, "volume": "data"})
	if len(failed) == 0 || !strings.Contains(fmt.Sprint(failed[0]["error"]), "mount points remain") {
		t.Errorf("no warn line for the failed teardown naming team/stuck and data: %v", failed)
	}
	if done := a.logLines(t, "volume torn down", map[string]string{"level": "info", "pod": "team/stuck", "volume": "cache"}); len(done) != 1 || done[0]["duration"] == nil {
		t.Errorf("the teardown of cache logged %v, want one info line with its duration", done)
	}
	checkFile(t, filepath.Join(nested, "keep"), "kept")

	if out, err := exec.Command("umount", nested).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v: %s", err, out)
	}
	start := time.Now()
	waitFor(t, 60*time.Second, "the pod gone from /v1/pods", func() (bool, string) {
		p2, code := a.statusPod(p.UID)
		return code == http.StatusNotFound, fmt.Sprintf("%d %+v", code, p2)
	})
	figure(t, "nested mount unmounted to the stuck pod torn down (backoff of the retries)", time.Since(start))
	a.waitPodDirGone(p.UID)
	for _, sample := range []string{"volume_agent_terminating_pods", "volume_agent_stuck_teardowns", `volume_agent_volumes{state="Terminating"}`} {
		if got := a.metric(sample); got != 0 {
			t.Errorf("%s = %v once torn down, want 0", sample, got)
		}
	}
	if done := a.logLines(t, "volume torn down", map[string]string{"level": "info", "pod": "team/stuck", "volume": "data"}); len(done) != 1 {
		t.Errorf("the teardown of data logged %v, want one info line", done)
	}
	if done := a.logLines(t, "pod directory removed", map[string]string{"level": "info", "pod": "team/stuck"}); len(done) != 1 {
		t.Errorf("the pod directory's removal logged %v, want one info line", done)
	}
	checkFile(t, filepath.Join(src, "keep"), "kept")
	a.checkLogLines()
}

// nfsMissing is an NFS PV of an export path the server does not have, and
// a pod using it through a claim.
const nfsMissing = `
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-missing}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteMany]
  mountOptions: [%s]
  nfs: {server: "127.0.0.1", path: "/missing"}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: missing}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  volumeName: pv-missing
  resources: {requests: {storage: 1Gi}}
`

// TestNFSFailedMountsDirectoryGoesWithThePod: an NFS mount the server
// refuses (a missing export) fails the set-up, which leaves the pod's
// directory behind; when the pod is deleted, its directory goes at once
// (it stayed until a restart). The failure is logged once per attempt at
// warn level with the pod, the volume's name in the pod and its PV, and
// mount(8)'s report on the same line.
func TestNFSFailedMountsDirectoryGoesWithThePod(t *testing.T) {
	e := startNFS(t)
	a := e.a
	a.writeManifest("missing.yaml", fmt.Sprintf(nfsMissing, e.srv.MountOptions("soft", "timeo=10", "retrans=1")))
	a.writeManifest("pod.yaml", strings.ReplaceAll(fmt.Sprintf(nfsPod, "db", false), "claimName: shared", "claimName: missing"))
	a.start()
	p := a.waitPod("default", "db", 30*time.Second, func(p apiPod) bool { return p.volume("share").State == "Failed" })
	v := p.volume("share")
	if strings.ContainsAny(v.Error, "\r\n") || !strings.Contains(v.Error, "; Mounting command: ") {
		t.Errorf("the volume's error is not mount(8)'s report on one line: %q", v.Error)
	}
	podDir := filepath.Join(a.root, "pods", p.UID)
	if _, err := os.Stat(podDir); err != nil {
		t.Fatalf("the failed set-up left no pod directory (%v); the test shows nothing", err)
	}
	failed := a.logLines(t, "volume set-up failed", map[string]string{"level": "warn", "pod": "default/db", "podUID": p.UID, "volume": "share", "pv": "pv-missing"})
	if len(failed) == 0 {
		t.Errorf("no warn line for the failed set-up naming default/db, share and pv-missing")
	}

	start := time.Now()
	a.removeManifest("pod.yaml")
	a.waitPodDirGone(p.UID)
	took := time.Since(start)
	figure(t, "pod with a failed NFS mount removed to its directory gone", took)
	if took > 5*time.Second {
		t.Errorf("the pod directory went %v after the pod; want it at once, not at a resync", took)
	}
	if _, code := a.statusPod(p.UID); code != http.StatusNotFound {
		t.Errorf("/v1/pods/%s = %d once its directory is gone, want 404", p.UID, code)
	}
	a.checkLogLines()
}
