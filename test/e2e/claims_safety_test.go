package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The end-to-end tests of issue 16 in manifest mode: claims and provisioned
// volumes never lose or leak data through ordinary operator actions. Each
// drives the built binary through its manifests, flags, signals and
// /v1/claims only.

// provEnv is an agent with the local provisioner and a Delete class "gone".
type provEnv struct {
	*agent
	data string // --local-path-root
}

// newProvEnv prepares an agent whose manifests hold the classes gone
// (Delete), archive (Delete, archiveOnDelete) and keep (Retain); start it
// with provEnv.start.
func newProvEnv(t *testing.T) *provEnv {
	a := newAgent(t)
	e := &provEnv{agent: a, data: filepath.Join(t.TempDir(), "local")}
	a.writeManifest("classes.yaml", fmt.Sprintf(localClassManifest, "gone", "Delete", false)+"---"+
		fmt.Sprintf(localClassManifest, "archive", "Delete", true)+"---"+fmt.Sprintf(localClassManifest, "keep", "Retain", false))
	return e
}

// start starts the agent with the local provisioner and extra flags.
func (e *provEnv) start(extra ...string) {
	e.agent.start(append([]string{"--provisioners", "local", "--local-path-root", e.data}, extra...)...)
}

// addClaim writes claim name of class and a pod use-<name> using it, waits
// for the pod to be ready, writes a file into the volume and returns the
// volume's directory under the local path root and its PV.
func (e *provEnv) addClaim(name, class string) (dir, pv string) {
	e.t.Helper()
	e.writeManifest("claim-"+name+".yaml", fmt.Sprintf(classClaim, name, class))
	e.writeManifest("pod-"+name+".yaml", fmt.Sprintf(classPod, "use-"+name, name))
	v := e.waitPod("default", "use-"+name, 20*time.Second, ready).volume("store")
	dir = filepath.Join(e.data, "default-"+name+"-"+v.PV)
	if err := os.WriteFile(filepath.Join(v.Path, "written"), []byte("by use-"+name), 0o644); err != nil {
		e.t.Fatal(err)
	}
	checkFile(e.t, filepath.Join(dir, "written"), "by use-"+name)
	return dir, v.PV
}

// claim returns the /v1/claims entries of claim name.
func (e *provEnv) claim(name string) []apiClaim {
	var out []apiClaim
	for _, c := range e.claims() {
		if c.Name == name {
			out = append(out, c)
		}
	}
	return out
}

// holds checks, for d, that dir still holds the file addClaim wrote (and
// the pod's data with it), waiting d first.
func holds(t *testing.T, d time.Duration, dir, name string) {
	t.Helper()
	time.Sleep(d)
	checkFile(t, filepath.Join(dir, "written"), "by use-"+name)
}

// An empty manifest directory at start (a disk not mounted yet, a config
// tool that recreates it), or one emptied while the agent runs, deletes
// nothing, even with no reclaim delay; the claim says why it is kept. Put
// back, the pod gets its data.
func TestEmptyManifestDirectoryDeletesNothing(t *testing.T) {
	e := newProvEnv(t)
	e.start("--reclaim-delay", "0s")
	dir, pv := e.addClaim("data", "gone")
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	saved := t.TempDir()
	moveAll(t, e.manifests, saved)
	e.start("--reclaim-delay", "0s")
	holds(t, 3*time.Second, dir, "data")
	if c := e.claim("data"); len(c) != 1 || c[0].Phase != "Bound" || c[0].PV != pv || !strings.Contains(c[0].Error, "has listed nothing since") {
		t.Errorf("/v1/claims for data = %+v; want Bound, kept because its removal was not seen", c)
	}
	moveAll(t, saved, e.manifests)
	e.waitPod("default", "use-data", 20*time.Second, ready)
	// Emptied while the agent runs, then refilled: nothing is released
	// meanwhile, and the pod keeps its data.
	moveAll(t, e.manifests, saved)
	holds(t, 3*time.Second, dir, "data")
	if c := e.claim("data"); len(c) != 1 || !strings.Contains(c[0].Error, "emptied directory never releases") {
		t.Errorf("/v1/claims for data = %+v; want kept because the directory is empty", c)
	}
	moveAll(t, saved, e.manifests)
	v := e.waitPod("default", "use-data", 20*time.Second, ready).volume("store")
	checkFile(t, filepath.Join(v.Path, "written"), "by use-data")
	if strings.Contains(e.logs.String(), `"claim released"`) {
		t.Error("a claim was released")
	}
}

// moveAll moves every file of from into to.
func moveAll(t *testing.T, from, to string) {
	t.Helper()
	des, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range des {
		if err := os.Rename(filepath.Join(from, d.Name()), filepath.Join(to, d.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// A claim file rewritten as config tools do (`rm; sleep 0.3; cp`) keeps
// its claim: no release, no deletion, even with no reclaim delay and no pod
// using the claim at the time.
func TestClaimFileRewrittenKeepsItsData(t *testing.T) {
	e := newProvEnv(t)
	e.start("--reclaim-delay", "0s")
	dir, _ := e.addClaim("data", "gone")
	e.removeManifest("pod-data.yaml")
	waitFor(t, 20*time.Second, "the pod gone", func() (bool, string) {
		_, ok := e.pod("default", "use-data")
		return !ok, ""
	})
	claimFile := filepath.Join(e.manifests, "claim-data.yaml")
	content, err := os.ReadFile(claimFile)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := os.Remove(claimFile); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		if err := os.WriteFile(claimFile, content, 0o644); err != nil {
			t.Fatal(err)
		}
		holds(t, time.Second, dir, "data")
	}
	if strings.Contains(e.logs.String(), `"claim released"`) {
		t.Error("the claim was released")
	}
}

// A pod and its claim removed together while a process still works in the
// volume: the teardown fails (the mount is busy) and the storage stays,
// whole, until the volume is torn down; then it goes (no reclaim delay).
func TestStorageInUseIsNotDeleted(t *testing.T) {
	e := newProvEnv(t)
	e.start("--reclaim-delay", "0s")
	dir, _ := e.addClaim("data", "gone")
	v := e.waitPod("default", "use-data", 5*time.Second, ready).volume("store")
	worker := exec.Command("sleep", "600") // its working directory keeps the mount busy
	worker.Dir = v.Path
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stopWorker := func() {
		if !stopped {
			_ = worker.Process.Kill()
			_ = worker.Wait()
			stopped = true
		}
	}
	t.Cleanup(stopWorker)
	e.removeManifest("pod-data.yaml")
	e.removeManifest("claim-data.yaml")
	holds(t, 4*time.Second, dir, "data")
	if c := e.claim("data"); len(c) != 1 || c[0].Phase != "Bound" || !strings.Contains(c[0].Error, "still set up for a pod") {
		t.Errorf("/v1/claims for data = %+v; want Bound, held while the pod has it", c)
	}
	stopWorker()
	waitFor(t, 30*time.Second, "the storage deleted once torn down", func() (bool, string) {
		_, err := os.Stat(dir)
		return os.IsNotExist(err), fmt.Sprint(entries(t, e.data), err)
	})
}

// A deletion that fails part way (an immutable file) is recorded: the
// claim put back, across a SIGKILL restart, is never bound to the half
// deleted volume; once the deletion can finish, it gets a new one.
func TestHalfDeletedVolumeIsNeverBoundAgain(t *testing.T) {
	if _, err := exec.LookPath("chattr"); err != nil {
		t.Skip("needs chattr (e2fsprogs)")
	}
	e := newProvEnv(t)
	e.start("--reclaim-delay", "0s")
	dir, pv := e.addClaim("data", "gone")
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("file-%02d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stuck := filepath.Join(dir, "file-05")
	if out, err := exec.Command("chattr", "+i", stuck).CombinedOutput(); err != nil {
		t.Skipf("chattr +i is not supported here: %v: %s", err, out)
	}
	aside := filepath.Join(e.data, ".pending-delete-"+pv)
	t.Cleanup(func() {
		_ = exec.Command("chattr", "-i", filepath.Join(aside, "file-05")).Run()
		_ = exec.Command("chattr", "-i", stuck).Run()
	})
	claimYAML, _ := os.ReadFile(filepath.Join(e.manifests, "claim-data.yaml"))
	podYAML, _ := os.ReadFile(filepath.Join(e.manifests, "pod-data.yaml"))
	e.removeManifest("pod-data.yaml")
	e.removeManifest("claim-data.yaml")
	waitFor(t, 30*time.Second, "the deletion stuck on the immutable file", func() (bool, string) {
		got := entries(t, aside)
		return len(got) > 0 && len(got) < 21, fmt.Sprint(got)
	})
	e.writeManifest("claim-data.yaml", string(claimYAML))
	e.writeManifest("pod-data.yaml", string(podYAML))
	e.restart(true)
	waitFor(t, 10*time.Second, "the claim waiting for the deletion", func() (bool, string) {
		c := e.claim("data")
		return len(c) > 0 && c[0].Phase == "Pending" && strings.Contains(c[0].Error, "is being deleted"), fmt.Sprintf("%+v", c)
	})
	time.Sleep(2 * time.Second)
	if p, ok := e.pod("default", "use-data"); !ok || p.Ready {
		t.Fatalf("pod use-data = %+v; want not ready: its claim's old volume is half deleted", p)
	}
	if out, err := exec.Command("chattr", "-i", filepath.Join(aside, "file-05")).CombinedOutput(); err != nil {
		t.Fatalf("chattr -i: %v: %s", err, out)
	}
	v := e.waitPod("default", "use-data", 60*time.Second, ready).volume("store")
	if got := entries(t, v.Path); len(got) != 0 {
		t.Errorf("the claim's new volume holds %v, want nothing", got)
	}
}

// A misspelt parameter of a local class (archiveOnDelte) is refused: the
// claim stays Pending naming the parameter, and nothing is provisioned.
func TestMisspeltClassParameterIsRefused(t *testing.T) {
	e := newProvEnv(t)
	e.writeManifest("typo.yaml", strings.Replace(fmt.Sprintf(localClassManifest, "typo", "Delete", true), "archiveOnDelete", "archiveOnDelte", 1))
	e.start()
	e.writeManifest("claim-data.yaml", fmt.Sprintf(classClaim, "data", "typo"))
	e.writeManifest("pod-data.yaml", fmt.Sprintf(classPod, "use-data", "data"))
	waitFor(t, 10*time.Second, "the claim refused", func() (bool, string) {
		c := e.claim("data")
		return len(c) == 1 && c[0].Phase == "Pending" && strings.Contains(c[0].Error, `unknown parameter "archiveOnDelte"`), fmt.Sprintf("%+v", c)
	})
	if got := entries(t, e.data); len(got) != 0 {
		t.Errorf("%s holds %v, want nothing", e.data, got)
	}
}

// runFailing runs the agent with args and returns its exit code and
// output; it must exit within 30 s.
func runFailing(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the agent did not exit: %s", out)
	}
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	return code, string(out)
}

// Two agents never share a --local-path-root: the second is refused (it
// would hand out, and delete, the first's volumes), and the first's volume
// is untouched.
func TestTwoAgentsCannotShareALocalPathRoot(t *testing.T) {
	e := newProvEnv(t)
	e.start()
	dir, _ := e.addClaim("data", "gone")
	code, out := runFailing(t, "--manifests", t.TempDir(), "--root-dir", t.TempDir(), "--status-addr", freeAddr(t),
		"--node-name", "node-2", "--provisioners", "local", "--local-path-root", e.data)
	if code != 1 || !strings.Contains(out, "is in use by process") {
		t.Errorf("second agent: exit %d, output:\n%s\nwant exit 1 saying the root is in use", code, out)
	}
	holds(t, 0, dir, "data")
}

// A --local-path-root reached through a symlink into --root-dir is
// refused: resetting the agent by deleting its root dir would delete
// provisioned data.
func TestLocalPathRootInsideTheRootDirThroughASymlink(t *testing.T) {
	root := t.TempDir()
	inside := filepath.Join(root, "data")
	if err := os.Mkdir(inside, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "local")
	if err := os.Symlink(inside, link); err != nil {
		t.Fatal(err)
	}
	code, out := runFailing(t, "--manifests", t.TempDir(), "--root-dir", root, "--status-addr", freeAddr(t),
		"--node-name", "node-1", "--provisioners", "local", "--local-path-root", link)
	if code != 1 || !strings.Contains(out, "must not contain each other") {
		t.Errorf("exit %d, output:\n%s\nwant exit 1 saying the two contain each other", code, out)
	}
}

// A local path root that exists with mode 0755 is made root-only; no other
// user of the node can reach a volume, list the claims' names or delete
// anything, while the pod's mount works as before.
func TestProvisionedVolumesArePrivate(t *testing.T) {
	e := newProvEnv(t)
	if err := os.MkdirAll(e.data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(e.data), 0o755); err != nil {
		t.Fatal(err)
	}
	e.start()
	dir, _ := e.addClaim("data", "gone")
	if st, err := os.Stat(e.data); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v, %v; want mode 0700", e.data, st.Mode(), err)
	}
	for _, args := range [][]string{{"ls", e.data}, {"cat", filepath.Join(dir, "written")}, {"rm", "-rf", dir}} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("%v as nobody succeeded: %s", args, out)
		}
	}
	holds(t, 0, dir, "data")
	v := e.waitPod("default", "use-data", 5*time.Second, ready).volume("store")
	checkFile(t, filepath.Join(v.Path, "written"), "by use-data")
}

// A claim that names its PersistentVolume (spec.volumeName) is never
// provisioned: it waits for that PV and binds it once it appears.
func TestClaimNamingAVolumeIsNotProvisioned(t *testing.T) {
	e := newProvEnv(t)
	e.start()
	e.writeManifest("claim-data.yaml", withSpecField(fmt.Sprintf(classClaim, "data", "gone"), "volumeName: pv-later"))
	e.writeManifest("pod-data.yaml", fmt.Sprintf(classPod, "use-data", "data"))
	waitFor(t, 10*time.Second, "the claim waiting for its PV", func() (bool, string) {
		c := e.claim("data")
		return len(c) == 1 && c[0].Phase == "Pending" && strings.Contains(c[0].Error, "never provisioned"), fmt.Sprintf("%+v", c)
	})
	time.Sleep(time.Second)
	if got := entries(t, e.data); len(got) != 0 {
		t.Fatalf("%s holds %v: the claim was provisioned", e.data, got)
	}
	pv := strings.Replace(fmt.Sprintf(localPV, "pv-later", "1Gi", disk(t, "later")), "storageClassName: local", "storageClassName: gone", 1)
	e.writeManifest("pv-later.yaml", pv)
	v := e.waitPod("default", "use-data", 20*time.Second, ready).volume("store")
	if v.PV != "pv-later" {
		t.Errorf("use-data's volume is %+v, want PV pv-later", v)
	}
}

// A Released static PV (Retain) whose manifest is moved away and back is
// never given to another claim: its old claim's data stays its own.
func TestReleasedStaticPVNeverGoesToAnotherClaim(t *testing.T) {
	a := newAgent(t)
	src := disk(t, "tenant-a")
	pv := fmt.Sprintf(localPV, "pv-a", "1Gi", src)
	a.writeManifest("pv.yaml", pv)
	a.writeManifest("claim.yaml", dataClaim)
	a.writeManifest("pod.yaml", fmt.Sprintf(claimPod, "first"))
	a.start("--reclaim-delay", "1h")
	a.waitPod("default", "first", 20*time.Second, ready)
	a.removeManifest("pod.yaml")
	a.removeManifest("claim.yaml")
	waitFor(t, 20*time.Second, "pv-a Released", func() (bool, string) {
		c := claimOf(a.claims(), "data")
		return c.Phase == "Released" && c.PV == "pv-a", fmt.Sprintf("%+v", a.claims())
	})
	a.removeManifest("pv.yaml")
	time.Sleep(3 * time.Second)
	a.writeManifest("pv.yaml", pv)
	a.writeManifest("other.yaml", strings.Replace(dataClaim, "name: data", "name: other", 1)+"---"+
		strings.Replace(fmt.Sprintf(claimPod, "second"), "claimName: data", "claimName: other", 1))
	waitFor(t, 10*time.Second, "claim other Pending", func() (bool, string) {
		c := claimOf(a.claims(), "other")
		return c.Phase == "Pending" && strings.Contains(c.Error, "released by default/data"), fmt.Sprintf("%+v", a.claims())
	})
	time.Sleep(time.Second)
	if p, ok := a.pod("default", "second"); ok && p.Ready {
		t.Errorf("pod second is ready with the previous tenant's volume: %+v", p)
	}
}

// Released storage of a Delete class is moved aside, not deleted, for the
// reclaim delay: /v1/claims and volume-agent claims say when it goes, it
// survives a SIGKILL restart, and the claim added back within the delay
// gets the same volume with its data.
func TestReleasedStorageIsRestorableWithinTheDelay(t *testing.T) {
	e := newProvEnv(t)
	e.start() // the default delay, 10 minutes
	dir, pv := e.addClaim("data", "gone")
	claimYAML, _ := os.ReadFile(filepath.Join(e.manifests, "claim-data.yaml"))
	podYAML, _ := os.ReadFile(filepath.Join(e.manifests, "pod-data.yaml"))
	released := time.Now()
	e.removeManifest("pod-data.yaml")
	e.removeManifest("claim-data.yaml")
	aside := filepath.Join(e.data, ".pending-delete-"+pv)
	waitFor(t, 20*time.Second, "the storage moved aside", func() (bool, string) {
		c := e.claim("data")
		_, err := os.Stat(filepath.Join(aside, "written"))
		return err == nil && len(c) == 1 && c[0].PendingDeletion != nil && c[0].PendingDeletion.Step == "Aside", fmt.Sprintf("%+v %v", c, err)
	})
	c := e.claim("data")[0]
	if at := *c.PendingDeletion.DeleteAfter; c.Phase != "Released" || c.ReclaimPolicy != "Delete" ||
		at.Before(released.Add(10*time.Minute-time.Second)) || at.After(time.Now().Add(10*time.Minute+time.Second)) {
		t.Errorf("/v1/claims for data = %+v (deleteAfter %v); want Released, Delete, deleted 10 minutes after the release", c, at)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the volume's own path: %v; want it gone while aside (no new pod can reach it)", err)
	}
	out := runCLI(t, "claims", "--addr", e.addr)
	if !strings.Contains(out.stdout, "default/data") || !strings.Contains(out.stdout, "Aside") || !(strings.Contains(out.stdout, "(in 9m") || strings.Contains(out.stdout, "(in 10m)")) {
		t.Errorf("volume-agent claims:\n%s%s\nwant data Aside, deleted in 9m…", out.stdout, out.stderr)
	}
	e.restart(true)
	holds(t, time.Second, aside, "data")
	e.writeManifest("claim-data.yaml", string(claimYAML))
	e.writeManifest("pod-data.yaml", string(podYAML))
	v := e.waitPod("default", "use-data", 20*time.Second, ready).volume("store")
	if v.PV != pv {
		t.Errorf("the claim back got PV %s, want its own %s", v.PV, pv)
	}
	checkFile(t, filepath.Join(v.Path, "written"), "by use-data")
	if _, err := os.Stat(aside); !os.IsNotExist(err) {
		t.Errorf("%s: %v; want it restored, gone", aside, err)
	}
}

// An operator has a retained provisioned volume deleted by giving its
// claim the annotation volume-agent.io/reclaim-policy: Delete before
// deleting it; a claim of a Retain class without it keeps its data.
func TestReclaimPolicyAnnotationDeletesARetainedVolume(t *testing.T) {
	e := newProvEnv(t)
	e.start("--reclaim-delay", "0s")
	kept, _ := e.addClaim("kept", "keep")
	doomed, _ := e.addClaim("doomed", "keep")
	e.writeManifest("claim-doomed.yaml", strings.Replace(fmt.Sprintf(classClaim, "doomed", "keep"), "metadata: {name: doomed}",
		"metadata: {name: doomed, annotations: {volume-agent.io/reclaim-policy: Delete}}", 1))
	waitFor(t, 10*time.Second, "the policy applied", func() (bool, string) {
		c := e.claim("doomed")
		return len(c) == 1 && c[0].ReclaimPolicy == "Delete", fmt.Sprintf("%+v", c)
	})
	for _, name := range []string{"kept", "doomed"} {
		e.removeManifest("pod-" + name + ".yaml")
		e.removeManifest("claim-" + name + ".yaml")
	}
	waitFor(t, 30*time.Second, "the annotated claim's volume deleted", func() (bool, string) {
		_, err := os.Stat(doomed)
		return os.IsNotExist(err), fmt.Sprint(entries(t, e.data))
	})
	holds(t, time.Second, kept, "kept")
	if c := e.claim("kept"); len(c) != 1 || c[0].Phase != "Released" || c[0].ReclaimPolicy != "Retain" || c[0].PendingDeletion != nil {
		t.Errorf("/v1/claims for kept = %+v; want Released, Retain, nothing pending", c)
	}
}
