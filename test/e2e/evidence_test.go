package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 27: nothing is destroyed or handed to a new owner without
// evidence. One test per finding.

// startScratch starts a with pod default/name of scratchPod, ready, with a
// marker file in its emptyDir; it returns the pod and the marker's path.
func startScratch(a *agent, name string) (apiPod, string) {
	a.t.Helper()
	a.writeManifest(name+".yaml", scratchPod(name))
	a.start()
	return a.marked(name)
}

// Finding 2: a second agent given the same --root-dir is refused, naming
// the first agent's PID, and the first agent's pods keep their data.
func TestSecondAgentOnTheSameRootIsRefused(t *testing.T) {
	a := newAgent(t)
	p, file := startScratch(a, "web")
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "other.yaml"), []byte(scratchPod("other")), 0o644); err != nil {
		t.Fatal(err)
	}
	// Killed after 20 s: an agent that is not refused runs on.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--manifests", other, "--root-dir", a.root, "--node-name", "node-1", "--status-addr", freeAddr(t))
	cmd.Env = append(os.Environ(), "VOLUME_AGENT_TEST_LOCK_WAIT=1s") // not the 15 s it waits for an agent it replaces
	start := time.Now()
	out, err := cmd.CombinedOutput()
	want := fmt.Sprintf("--root-dir %s is in use by process %d", a.resolvedRoot(), a.cmd.Process.Pid)
	if err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("second agent on the same root: %v after %v\n%s\nwant a refusal containing %q", err, time.Since(start), tail(string(out), 20), want)
	}
	checkFile(t, file, "web")
	if now, ok := a.pod("default", "web"); !ok || !now.Ready || now.UID != p.UID {
		t.Fatalf("the first agent's pod after the refusal: %+v", now)
	}
}

// Finding 1: an agent started on an empty manifest directory tears down
// nothing it finds on disk: the pods stay, Held, with their data, after a
// SIGTERM and after a SIGKILL; the manifest back, the pod is Active with
// its data. Only a directory that lists objects, for the settle time, is
// evidence that a pod it lacks is gone. The root is reached through a
// symlink, and a bind mount of the same file system sits in the volume.
func TestEmptyManifestDirectoryAtStartTearsDownNothing(t *testing.T) {
	a := newAgent(t)
	base := symlinkedRoot(t, a)
	p, marker := startScratch(a, "web")
	src, nested := filepath.Join(base, "precious"), filepath.Join(p.volume("scratch").Path, "mnt")
	for _, dir := range []string{src, nested} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "a"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "--bind", src, nested).CombinedOutput(); err != nil {
		t.Fatalf("bind mount: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", nested).Run() })
	for _, crash := range []bool{false, true} {
		if crash {
			a.kill()
		} else if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		a.removeManifest("web.yaml")
		a.start()
		waitFor(t, 10*time.Second, "the pod found on disk held", func() (bool, string) {
			held, _ := a.pod("default", "web")
			return held.UID == p.UID && held.State == "Held" && strings.Contains(held.Reason, "has listed nothing since"), fmt.Sprintf("%+v", held)
		})
		_, sources := a.get("/v1/sources")
		if !strings.Contains(sources, `"synced": true`) {
			t.Fatalf("/v1/sources = %s, want the manifests synced", sources)
		}
		time.Sleep(2 * time.Second) // well past the settle time: a wrong teardown would have run
		checkFile(t, marker, "web")
		checkFile(t, filepath.Join(src, "a"), "keep")
		if !isMountPoint(t, nested) {
			t.Fatalf("crash %v: the bind mount inside the held pod's volume is gone", crash)
		}
		if strings.Contains(a.logs.String(), "volume torn down") {
			t.Fatalf("crash %v: a volume was torn down:\n%s", crash, tail(a.logs.String(), 30))
		}
		a.writeManifest("web.yaml", scratchPod("web"))
		back := a.waitPod("default", "web", 10*time.Second, ready)
		if back.UID != p.UID || back.volume("scratch").Path != p.volume("scratch").Path {
			t.Fatalf("the pod back is %+v, want %+v", back, p)
		}
		checkFile(t, marker, "web")
	}

	// A directory that lists something else at start: the pod it lacks is
	// gone, once that has held for the settle time.
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("umount", nested).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v: %s", err, out)
	}
	a.removeManifest("web.yaml")
	a.writeManifest("other.yaml", scratchPod("other"))
	a.start()
	a.waitPodDirGone(p.UID)
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the marker of the removed pod: %v", err)
	}
	checkFile(t, filepath.Join(src, "a"), "keep")
}

// startEphemeral starts a with the class of ephemeralClassManifest and pod
// name with an ephemeral volume, and writes a marker into the volume; it
// returns the volume and the local path root.
func startEphemeral(a *agent, name string, flags ...string) (apiVolume, string) {
	a.t.Helper()
	data := filepath.Join(a.t.TempDir(), "local")
	a.writeManifest("class.yaml", ephemeralClassManifest)
	a.writeManifest(name+".yaml", fmt.Sprintf(ephemeralPodManifest, name, "{}"))
	a.start(append([]string{"--provisioners", "local", "--local-path-root", data}, flags...)...)
	v := a.waitPod("default", name, 20*time.Second, ready).volume("scratch")
	if err := os.WriteFile(filepath.Join(v.Path, "written"), []byte("by the first "+name), 0o644); err != nil {
		a.t.Fatal(err)
	}
	return v, data
}

// Finding 3: a new pod that reuses a deleted pod's name, within the
// reclaim delay, gets a new claim and an empty volume, never the old
// pod's; the old volume waits aside for its own claim alone.
func TestEphemeralVolumeOfAReusedNameStartsEmpty(t *testing.T) {
	a := newAgent(t)
	old, data := startEphemeral(a, "web", "--reclaim-delay", "1h")
	a.removeManifest("web.yaml")
	waitFor(t, 20*time.Second, "the old claim released and aside", func() (bool, string) {
		_, claims := a.get("/v1/claims")
		return strings.Contains(claims, `"step": "Aside"`), claims
	})
	a.writeManifest("web.yaml", strings.Replace(fmt.Sprintf(ephemeralPodManifest, "web", "{}"), "image: busybox", "image: nginx", 1))
	v := a.waitPod("default", "web", 20*time.Second, ready).volume("scratch")
	if v.PV == old.PV || v.Path == old.Path {
		t.Fatalf("the new pod's volume is %+v, the old pod's was %+v: want another claim and volume", v, old)
	}
	if got := entries(t, v.Path); len(got) != 0 {
		t.Fatalf("the new pod's volume holds %v, want it empty", got)
	}
	aside := filepath.Join(data, ".pending-delete-"+old.PV)
	checkFile(t, filepath.Join(aside, "written"), "by the first web")
}

// Finding 4: the ephemeral volume of a pod removed while the agent was
// stopped is reclaimed once the manifests have listed objects for the
// settle time; a pod of the same name added later starts empty.
func TestEphemeralVolumeOfAPodRemovedWhileStoppedIsReclaimed(t *testing.T) {
	a := newAgent(t)
	old, data := startEphemeral(a, "web", "--reclaim-delay", "2s")
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	a.removeManifest("web.yaml")
	a.start(a.extra...)
	waitFor(t, 30*time.Second, "the old claim and its volume deleted", func() (bool, string) {
		_, claims := a.get("/v1/claims")
		return !strings.Contains(claims, "web-scratch") && len(entries(t, data)) == 0 && len(stateEphemeralClaims(t, a.root)) == 0,
			fmt.Sprint(claims, entries(t, data))
	})
	a.writeManifest("web.yaml", fmt.Sprintf(ephemeralPodManifest, "web", "{}"))
	v := a.waitPod("default", "web", 20*time.Second, ready).volume("scratch")
	if v.PV == old.PV {
		t.Fatalf("the new pod got the old claim's volume %s", v.PV)
	}
	if got := entries(t, v.Path); len(got) != 0 {
		t.Fatalf("the new pod's volume holds %v, want it empty", got)
	}
}

// A missing claims.json is never taken for "no bindings" when the disk
// shows claims were bound: the start is refused, saying what to do; the
// file written empty on purpose, the agent starts and the claim, bound
// again, keeps its data.
func TestMissingClaimStateWithBoundClaimsIsRefused(t *testing.T) {
	e := newProvEnv(t)
	e.start()
	dir, _ := e.addClaim("data", "keep")
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(e.root, "claims.json")
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "--manifests", e.manifests, "--root-dir", e.root, "--node-name", "node-1",
		"--status-addr", freeAddr(t), "--provisioners", "local", "--local-path-root", e.data)
	out, err := cmd.CombinedOutput()
	if want := "is missing, but claims were bound before"; err == nil || !strings.Contains(string(out), want) || !strings.Contains(string(out), dir) {
		t.Fatalf("start without claims.json: %v\n%s\nwant a refusal containing %q naming %s", err, tail(string(out), 10), want, dir)
	}
	if err := os.WriteFile(state, []byte(`{"version": 1, "bindings": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitPod("default", "use-data", 20*time.Second, ready)
	checkFile(t, filepath.Join(dir, "written"), "by use-data")
}
