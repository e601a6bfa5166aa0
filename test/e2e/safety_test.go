package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const twoVolumePod = `
apiVersion: v1
kind: Pod
metadata: {name: keeper}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
%s`

// TestKeptVolumeSurvivesRestarts: a volume dropped from a running pod's
// spec is kept, and the promise holds across a SIGTERM and a SIGKILL
// restart — it rests on what is on disk, not on memory.
func TestKeptVolumeSurvivesRestarts(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("pod.yaml", fmt.Sprintf(twoVolumePod, "  - {name: data, emptyDir: {}}\n  - {name: other, emptyDir: {}}\n"))
	a.start()
	p := a.waitPod("default", "keeper", 10*time.Second, ready)
	file := filepath.Join(p.volume("data").Path, "db")
	if err := os.WriteFile(file, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.writeManifest("pod.yaml", fmt.Sprintf(twoVolumePod, "  - {name: other, emptyDir: {}}\n"))
	kept := func(p apiPod) bool {
		v := p.volume("data")
		return p.Ready && v.State == "Mounted" && strings.Contains(v.Error, "kept until the pod is deleted")
	}
	a.waitPod("default", "keeper", 5*time.Second, kept)
	for _, crash := range []bool{false, true} {
		a.restart(crash)
		waitFor(t, 10*time.Second, "/readyz after restart", func() (bool, string) {
			code, body := a.get("/readyz")
			return code == 200, body
		})
		a.waitPod("default", "keeper", 5*time.Second, kept)
		time.Sleep(time.Second) // past the settle delay: a wrong teardown would have run
		checkFile(t, file, "precious")
	}
	a.removeManifest("pod.yaml")
	a.waitPodDirGone(p.UID)
}

// TestSymlinkedRootNeverDeletesThroughABindMount: with --root-dir reached
// through a symlink (a symlinked /var/lib), a directory of the same file
// system bind-mounted inside a pod's emptyDir (as a runtime or a
// Bidirectional container may do) is never entered when the pod goes: the
// teardown waits, and completes once the bind mount is gone.
func TestSymlinkedRootNeverDeletesThroughABindMount(t *testing.T) {
	a := newAgent(t)
	base := symlinkedRoot(t, a)
	a.writeManifest("pod.yaml", fmt.Sprintf(twoVolumePod, "  - {name: data, emptyDir: {}}\n"))
	a.start()
	p := a.waitPod("default", "keeper", 10*time.Second, ready)
	vol := p.volume("data").Path
	if strings.Contains(vol, "/link/") {
		t.Errorf("volume path %s is not resolved", vol)
	}
	src := filepath.Join(base, "precious") // the same file system as the root
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(src, f), []byte("keep "+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	nested := filepath.Join(vol, "mnt")
	if err := os.Mkdir(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "--bind", src, nested).CombinedOutput(); err != nil {
		t.Fatalf("bind mount: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", nested).Run() })
	intact := func(when string) {
		t.Helper()
		for _, f := range []string{"a", "b"} {
			checkFile(t, filepath.Join(src, f), "keep "+f)
		}
		if !isMountPoint(t, nested) {
			t.Fatalf("%s: the bind mount inside the volume is gone", when)
		}
	}

	// Restarts with the pod still there: nothing is remounted or touched.
	ids := mountIDsUnder(t, a.resolvedRoot())
	if !strings.Contains(ids, nested) {
		t.Fatalf("mounts under the root %s do not show the nested mount", ids)
	}
	for _, crash := range []bool{false, true} {
		a.restart(crash)
		a.waitPod("default", "keeper", 10*time.Second, ready)
		if after := mountIDsUnder(t, a.resolvedRoot()); after != ids {
			t.Fatalf("restart (crash %v) changed the mounts: %s -> %s", crash, ids, after)
		}
		intact(fmt.Sprintf("after a restart (crash %v)", crash))
	}

	// The pod goes: the teardown refuses, before and after a crash (the
	// directory lists something else, so the pod found on disk after the
	// crash is gone, not Held).
	a.writeManifest("keep.yaml", keepManifest)
	a.removeManifest("pod.yaml")
	for _, crash := range []bool{false, true} {
		waitFor(t, 10*time.Second, "the teardown refused", func() (bool, string) {
			return strings.Contains(a.logs.String(), "mount points remain"), ""
		})
		intact("after the refused teardown")
		if crash {
			break
		}
		a.restart(true)
	}

	if out, err := exec.Command("umount", nested).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v: %s", err, out)
	}
	a.waitPodDirGone(p.UID)
	for _, f := range []string{"a", "b"} {
		checkFile(t, filepath.Join(src, f), "keep "+f)
	}
}

// symlinkedRoot makes a's root dir one reached through a symlink, as a
// symlinked /var/lib makes it, and returns the directory holding both.
func symlinkedRoot(t *testing.T, a *agent) string {
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	a.root = filepath.Join(base, "link", "root")
	return base
}

// TestWaitingRequestIsToldTheAgentStops: a GET ?wait= still waiting when
// the agent gets SIGTERM (every DaemonSet rollout) answers 503, never 200
// with no pod in it.
func TestWaitingRequestIsToldTheAgentStops(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("pod.yaml", fmt.Sprintf(twoVolumePod, "  - {name: cfg, configMap: {name: missing}}\n"))
	a.start()
	p := a.waitPod("default", "keeper", 10*time.Second, func(p apiPod) bool { return p.volume("cfg").State == "Failed" })
	type answer struct {
		code int
		body string
	}
	answered := make(chan answer, 1)
	go func() {
		code, body := a.get("/v1/pods/" + p.UID + "?wait=1m")
		answered <- answer{code, body}
	}()
	time.Sleep(300 * time.Millisecond) // the request is waiting
	start := time.Now()
	if err := a.stop(); err != nil {
		t.Fatalf("agent exit: %v", err)
	}
	select {
	case got := <-answered:
		if got.code != 503 || !strings.Contains(got.body, "stopping") {
			t.Fatalf("waiting request answered %d %q during shutdown; want 503 saying the agent stops", got.code, got.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting request got no answer")
	}
	figure(t, "SIGTERM to exit with a request waiting", time.Since(start))
}

// TestTypoAtStartNeverEmptiesAVolume: the manifest of an optional
// configMap gets a syntax error while the agent is down. At start the
// configMap is not known yet — not absent — so its volume keeps its file
// and waits, and takes the fixed content once the file parses.
func TestTypoAtStartNeverEmptiesAVolume(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("pod.yaml", fmt.Sprintf(twoVolumePod, "  - {name: cfg, configMap: {name: settings, optional: true}}\n"))
	a.writeManifest("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {mode: fast}\n")
	a.start()
	p := a.waitPod("default", "keeper", 10*time.Second, ready)
	file := filepath.Join(p.volume("cfg").Path, "mode")
	checkFile(t, file, "fast")

	for _, crash := range []bool{false, true} {
		if crash {
			a.kill()
		} else if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		a.writeManifest("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings\ndata: [oops\n")
		a.start(a.extra...)
		a.waitPod("default", "keeper", 5*time.Second, func(p apiPod) bool {
			return strings.Contains(p.volume("cfg").Error, "not known yet")
		})
		time.Sleep(time.Second) // a wrong refresh would have emptied it by now
		checkFile(t, file, "fast")
		a.writeManifest("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {mode: fast}\n")
		a.waitPod("default", "keeper", 5*time.Second, ready)
		checkFile(t, file, "fast")
	}
}

// TestManifestsOnlyInAPod: an agent run in a pod (KUBERNETES_SERVICE_HOST
// set) with --in-cluster=false serves its manifests and syncs, instead of
// watching an API server for a node named after its pod.
func TestManifestsOnlyInAPod(t *testing.T) {
	a := newAgent(t)
	a.env = []string{"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=1"}
	a.writeManifest("pod.yaml", fmt.Sprintf(twoVolumePod, "  - {name: data, emptyDir: {}}\n"))
	a.start("--in-cluster=false")
	a.waitPod("default", "keeper", 10*time.Second, ready)
	waitFor(t, 5*time.Second, "/readyz", func() (bool, string) {
		code, body := a.get("/readyz")
		return code == 200, body
	})
	if _, body := a.get("/v1/sources"); strings.Contains(body, `"api"`) {
		t.Fatalf("an API source runs with --in-cluster=false: %s", body)
	}
}

// TestDiskFullDuringRefreshKeepsTheOldContent: with the root directory on
// a tiny tmpfs that fills up, a configMap edit cannot be written. The old
// content stays readable the whole time, the volume shows the error, and
// the edit lands once there is room again.
func TestDiskFullDuringRefreshKeepsTheOldContent(t *testing.T) {
	a := newAgent(t)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", a.root).CombinedOutput(); err != nil {
		t.Fatalf("mount a tiny tmpfs as the root: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", a.root).Run() })
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {value: %s}\n"
	a.writeManifest("pod.yaml", fmt.Sprintf(twoVolumePod, "  - {name: cfg, configMap: {name: settings}}\n  - {name: data, emptyDir: {}}\n"))
	a.writeManifest("cm.yaml", fmt.Sprintf(cm, "old"))
	a.start()
	p := a.waitPod("default", "keeper", 10*time.Second, ready)
	file := filepath.Join(p.volume("cfg").Path, "value")
	checkFile(t, file, "old")

	filler := filepath.Join(p.volume("data").Path, "filler")
	fillUp(t, filler)
	big := strings.Repeat("n", 64<<10)
	a.writeManifest("cm.yaml", fmt.Sprintf(cm, big))
	a.waitPod("default", "keeper", 10*time.Second, func(p apiPod) bool {
		v := p.volume("cfg")
		return v.State == "Mounted" && strings.Contains(v.Error, "no space left")
	})
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		checkFile(t, file, "old") // through every retry
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the edit written once there is room", func() (bool, string) {
		got, err := os.ReadFile(file)
		return string(got) == big, fmt.Sprint(len(got), err)
	})
	a.waitPod("default", "keeper", 5*time.Second, func(p apiPod) bool { return p.Ready && p.volume("cfg").Error == "" })
}

// fillUp writes path until its file system is full.
func fillUp(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !strings.Contains(err.Error(), "no space left") {
				t.Fatal(err)
			}
			return
		}
	}
}
