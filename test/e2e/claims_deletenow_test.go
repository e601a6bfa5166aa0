package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// deleteNowClaim is the claim "data" with a given metadata.uid: a claim
// of the same name and another uid is another claim.
const deleteNowClaim = `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, uid: %s}
spec:
  storageClassName: sized
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 20Mi}}
`

// TestClaimsDeleteNow: in manifest mode, with --reclaim-delay 1h, an
// operator deletes the storage a removed claim left aside, at once, with
// volume-agent claims delete-now and the claim's name typed again; a bound
// claim is refused, a wrong confirmation or no terminal does nothing, and
// a new claim of the same name (another uid) keeps its storage and data.
// The Aside step of this enforced volume (an image kept in place) is
// logged as set aside, never as moved.
func TestClaimsDeleteNow(t *testing.T) {
	root := imageLocalRoot(t)
	a := newAgent(t)
	a.start("--provisioners", "local", "--local-path-root", root, "--reclaim-delay", "1h")
	a.writeManifest("class.yaml", enforcedClass)
	a.writeManifest("claim.yaml", fmt.Sprintf(deleteNowClaim, "uid-old"))
	a.writeManifest("pod.yaml", writerPod)
	old := a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
	if err := os.WriteFile(filepath.Join(old.Path, "written"), []byte("old data"), 0o644); err != nil {
		t.Fatal(err)
	}
	cli := []string{"claims", "delete-now", "default/data", "--addr", a.addr, "--root-dir", a.root}

	r := runCLI(t, append(cli, "--confirm", "default/data")...)
	if r.code != 5 || !strings.Contains(r.stderr, "is Bound to PersistentVolume "+old.PV) || !strings.Contains(r.stderr, "nothing was done") {
		t.Fatalf("delete-now of a bound claim: exit %d, %q; want 5 and the claim's state", r.code, r.stderr)
	}

	a.removeManifest("pod.yaml")
	a.removeManifest("claim.yaml")
	waitFor(t, 30*time.Second, "the storage aside", func() (bool, string) {
		c := claimOf(a.claims(), "data")
		return c.PendingDeletion != nil && c.PendingDeletion.Step == "Aside", fmt.Sprintf("%+v", c)
	})
	// A new claim of the same name, another uid: its own storage.
	a.writeManifest("claim.yaml", fmt.Sprintf(deleteNowClaim, "uid-new"))
	a.writeManifest("pod.yaml", writerPod)
	newer := a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
	if newer.PV == old.PV {
		t.Fatalf("the new claim got the old claim's PV %s", old.PV)
	}
	if err := os.WriteFile(filepath.Join(newer.Path, "written"), []byte("new data"), 0o644); err != nil {
		t.Fatal(err)
	}
	oldDir := filepath.Join(root, "default-data-"+old.PV)
	checkFile(t, filepath.Join(oldDir, "written"), "old data")

	r = runCLI(t, cli...) // no terminal, no --confirm
	if r.code != 2 || !strings.Contains(r.stderr, "not a terminal") {
		t.Errorf("delete-now without a terminal: exit %d, %q; want 2 and a refusal", r.code, r.stderr)
	}
	r = runWithTerminal(t, "default/other\n", cli...)
	if r.code != 2 || !strings.Contains(r.stderr, "not confirmed, nothing was done") || !strings.Contains(r.stderr, "PersistentVolume "+old.PV) {
		t.Errorf("delete-now with the wrong name typed: exit %d, %q; want 2", r.code, r.stderr)
	}
	checkFile(t, filepath.Join(oldDir, "written"), "old data")

	r = runWithTerminal(t, "default/data\n", cli...)
	if r.code != 0 || r.stdout != "storage of PersistentVolume "+old.PV+" (claim default/data) deleted\n" || !strings.Contains(r.stderr, "It will be deleted now") {
		t.Fatalf("delete-now confirmed: exit %d, %q %q; want 0 and deleted", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(oldDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old claim's storage %s is still there: %v", oldDir, err)
	}
	for _, c := range a.claims() {
		if c.PV == old.PV {
			t.Errorf("/v1/claims still lists the deleted storage: %+v", c)
		}
	}
	claims := runCLI(t, "claims", "--addr", a.addr)
	if strings.Contains(claims.stdout, old.PV) || !strings.Contains(claims.stdout, newer.PV) {
		t.Errorf("volume-agent claims after the deletion:\n%s\nwant %s gone and %s bound", claims.stdout, old.PV, newer.PV)
	}
	if c := claimOf(a.claims(), "data"); c.Phase != "Bound" || c.PV != newer.PV {
		t.Errorf("the new claim: %+v, want Bound to %s", c, newer.PV)
	}
	checkFile(t, filepath.Join(newer.Path, "written"), "new data")

	logs := a.logs.String()
	for _, want := range []string{"released storage to be deleted before its reclaim delay ends, at an operator's request", `"uid":"uid-old"`,
		`"by":"user=root uid=0`, "released storage set aside until its deletion"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %q", want)
		}
	}
	if strings.Contains(logs, "moved aside") {
		t.Errorf("the log says an enforced volume, kept in place, was moved aside")
	}
	r = runCLI(t, append(cli, "--confirm", "default/data")...)
	if r.code != 5 || !strings.Contains(r.stderr, "is Bound to PersistentVolume "+newer.PV) {
		t.Errorf("delete-now again, the new claim bound: exit %d, %q; want 5", r.code, r.stderr)
	}
}

// runWithTerminal runs the built binary with args, a pseudo-terminal as
// its standard input, into which input is typed.
func runWithTerminal(t *testing.T, input string, args ...string) cliRun {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	defer master.Close()
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	go func() { _, _ = drain(master) }() // drain the echo
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := master.WriteString(input); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	run := cliRun{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		run.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("volume-agent %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("$ volume-agent %s  # typed %q, exit %d\n%s%s", strings.Join(args, " "), input, run.code, run.stdout, run.stderr)
	return run
}

// drain reads f until it fails.
func drain(f *os.File) (int, error) {
	buf := make([]byte, 4096)
	for {
		if _, err := f.Read(buf); err != nil {
			return 0, err
		}
	}
}

// TestStartLogCountsEnforcedVolumes: the start-up line "capacity enforced
// on the local path root" counts the volumes of enforced capacity the root
// holds (it said 0 with one image volume there).
func TestStartLogCountsEnforcedVolumes(t *testing.T) {
	root := imageLocalRoot(t)
	a := newAgent(t)
	a.start("--provisioners", "local", "--local-path-root", root)
	a.writeManifest("class.yaml", enforcedClass)
	a.writeManifest("claim.yaml", fmt.Sprintf(deleteNowClaim, "uid-1"))
	a.writeManifest("pod.yaml", writerPod)
	a.waitPod("default", "writer", 60*time.Second, ready)
	a.restart(false)
	a.waitPod("default", "writer", 60*time.Second, ready)
	var line string
	for _, l := range strings.Split(a.logs.String(), "\n") {
		if strings.Contains(l, "local path root opened for enforced capacity") {
			line = l
		}
	}
	if !strings.Contains(line, `"volumes":1`) {
		t.Errorf("the start after the restart logs %q, want volumes 1", line)
	}
}

// TestClaimsDeleteNowSurvivesAKill: the deletion delete-now asks for is
// recorded (step Deleting in claims.json) before it begins; an agent
// killed with SIGKILL while it fails (the image made immutable) finishes
// it after the restart, and the storage is never given back.
func TestClaimsDeleteNowSurvivesAKill(t *testing.T) {
	needTool(t, "chattr")
	root := imageLocalRoot(t)
	a := newAgent(t)
	a.start("--provisioners", "local", "--local-path-root", root, "--reclaim-delay", "1h")
	a.writeManifest("class.yaml", enforcedClass)
	a.writeManifest("claim.yaml", fmt.Sprintf(deleteNowClaim, "uid-kill"))
	a.writeManifest("pod.yaml", writerPod)
	v := a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
	a.removeManifest("pod.yaml")
	a.removeManifest("claim.yaml")
	waitFor(t, 30*time.Second, "the storage aside", func() (bool, string) {
		c := claimOf(a.claims(), "data")
		return c.PendingDeletion != nil && c.PendingDeletion.Step == "Aside", fmt.Sprintf("%+v", c)
	})
	imgs, _ := filepath.Glob(filepath.Join(root, "*.img"))
	if len(imgs) != 1 {
		t.Fatalf("images %v, want one", imgs)
	}
	run(t, "chattr", "+i", imgs[0])
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", imgs[0]).Run() })
	r := runCLI(t, "claims", "delete-now", "default/data", "--confirm", "default/data", "--timeout", "0", "--addr", a.addr, "--root-dir", a.root)
	if r.code != 0 || !strings.Contains(r.stdout, "deletion recorded and under way") {
		t.Fatalf("delete-now: exit %d, %q %q; want 0, recorded", r.code, r.stdout, r.stderr)
	}
	waitFor(t, 30*time.Second, "the deletion failing", func() (bool, string) {
		return strings.Contains(a.logs.String(), "storage operation failed"), ""
	})
	state, err := os.ReadFile(filepath.Join(a.root, "claims.json"))
	if err != nil || !strings.Contains(string(state), `"step":"Deleting"`) && !strings.Contains(string(state), `"step": "Deleting"`) {
		t.Fatalf("claims.json while the deletion fails: %s (%v); want the step Deleting recorded", state, err)
	}
	a.kill()
	run(t, "chattr", "-i", imgs[0])
	a.start(a.extra...)
	waitFor(t, 60*time.Second, "the deletion finished after the restart", func() (bool, string) {
		for _, c := range a.claims() {
			if c.PV == v.PV {
				return false, fmt.Sprintf("%+v", c)
			}
		}
		_, err := os.Stat(imgs[0])
		return errors.Is(err, os.ErrNotExist), fmt.Sprint(err)
	})
}
