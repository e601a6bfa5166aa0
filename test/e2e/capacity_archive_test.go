package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// archiveClass is a local class that enforces capacity (the default) and
// archives released volumes.
const archiveClass = `
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: sized}
provisioner: local.volume-agent.io
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
parameters: {archiveOnDelete: "true"}
`

// TestImageVolumeHoldsItsRequest: a 50Mi claim on an image root gets a
// volume that the user nobody can write 50 MiB into with dd; /v1/pods
// and the status CLI's SIZE give at least 50Mi (statfs of the volume),
// and the claims CLI's CAPACITY the request, 50Mi, no more.
func TestImageVolumeHoldsItsRequest(t *testing.T) {
	root := imageLocalRoot(t)
	needTool(t, "dd", "setpriv")
	a := newAgent(t)
	a.start("--provisioners", "local", "--local-path-root", root, "--reclaim-delay", "0s", "--volume-stats-period", "1s")
	a.writeManifest("class.yaml", enforcedClass)
	a.writeManifest("claim.yaml", strings.Replace(enforcedClaim, "100Mi", "50Mi", 1))
	a.writeManifest("pod.yaml", writerPod)
	v := a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
	// dd starts in the volume (the agent's directories above it are
	// root's alone), as a pod's process would.
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"dd", "if=/dev/urandom", "of=data", "bs=1M", "count=50", "conv=fsync", "status=none")
	cmd.Dir = v.Path
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("user nobody writing 50 MiB into a 50Mi volume with dd: %v: %s", err, out)
	}
	waitFor(t, 30*time.Second, "usage of 50 MiB in a volume of at least 50Mi", func() (bool, string) {
		u := a.usageOf("default", "writer")["store"]
		if u == nil {
			return false, "no usage"
		}
		return u.UsedBytes >= 50<<20 && u.CapacityBytes >= 50<<20, fmt.Sprintf("%+v", *u)
	})
	r := runCLI(t, "status", "--addr="+a.addr)
	var size string
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); len(f) >= 7 && f[0] == "default/writer" && f[1] == "store" {
			size = f[6]
		}
	}
	if n, err := parseMi(size); err != nil || n < 50 {
		t.Errorf("status SIZE of the 50Mi claim's volume = %q (%v), want at least 50Mi:\n%s", size, err, r.stdout)
	}
	r = runCLI(t, "claims", "--addr="+a.addr)
	if !strings.Contains(r.stdout, "50Mi") {
		t.Errorf("claims CAPACITY of the 50Mi claim is not 50Mi:\n%s", r.stdout)
	}
}

// parseMi reads a size the CLI prints in Mi ("50Mi", "50.4Mi").
func parseMi(s string) (float64, error) {
	n, ok := strings.CutSuffix(s, "Mi")
	if !ok {
		return 0, fmt.Errorf("%q is not in Mi", s)
	}
	return strconv.ParseFloat(n, 64)
}

// TestEnforcedArchiveOnDelete, in manifest mode, on btrfs and on images:
// a claim of a class that enforces capacity and archives gets a volume;
// deleted with its pod, it is released and kept in place (step Aside)
// until --reclaim-delay (8 s) has passed, also across a crash (SIGKILL)
// in between, then archived as archived-<volume> with its data (the
// subvolume, or the image detached) and its size recorded; a crash and a
// restart keep the archive and its record; the same claim added back
// gets a new, empty volume. (The room an archive takes is checked by
// local.TestArchiveEnforced: manifest mode publishes no room.)
func TestEnforcedArchiveOnDelete(t *testing.T) {
	t.Run("btrfs", func(t *testing.T) { checkArchiveOnDelete(t, btrfsLocalRoot(t, true), false) })
	t.Run("image", func(t *testing.T) { checkArchiveOnDelete(t, imageLocalRoot(t), true) })
}

func checkArchiveOnDelete(t *testing.T, root string, image bool) {
	a := newAgent(t)
	a.start("--provisioners", "local", "--local-path-root", root, "--reclaim-delay", "8s")
	a.writeManifest("class.yaml", archiveClass)
	claim := strings.Replace(enforcedClaim, "100Mi", "50Mi", 1)
	a.writeManifest("claim.yaml", claim)
	a.writeManifest("pod.yaml", writerPod)
	v := a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
	if err := os.WriteFile(filepath.Join(v.Path, "written"), []byte("by writer"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fill(filepath.Join(v.Path, "big"), 10<<20); err != nil {
		t.Fatal(err)
	}
	name := "default-data-" + v.PV
	archive := filepath.Join(root, "archived-"+name)
	if image {
		archive += ".img"
	}
	a.removeManifest("pod.yaml")
	a.removeManifest("claim.yaml")
	// Released, the volume waits aside (kept in place) for the delay.
	waitFor(t, 8*time.Second, "the volume pending deletion, not archived yet", func() (bool, string) {
		c := claimOf(a.claims(), "data")
		_, err := os.Lstat(archive)
		return c.PendingDeletion != nil && c.PendingDeletion.Step == "Aside" && os.IsNotExist(err), fmt.Sprintf("%+v, archive: %v", c, err)
	})
	checkFile(t, filepath.Join(root, name, "written"), "by writer")
	// A crash between the steps: the recorded deadline holds, and the
	// archive step comes after it.
	a.restart(true)
	waitFor(t, 60*time.Second, "the volume archived once the delay passed", func() (bool, string) {
		_, err := os.Lstat(archive)
		c := claimOf(a.claims(), "data")
		return err == nil && c.Name == "", fmt.Sprintf("archive: %v; claim %+v; root %v", err, c, entries(t, root))
	})
	if !strings.Contains(a.logs.String(), "archived local volume") {
		t.Error("no log of the archived volume")
	}
	if _, err := os.Lstat(filepath.Join(root, name)); !os.IsNotExist(err) {
		t.Errorf("the volume's directory after archiving: %v, want it gone", err)
	}
	checkArchived(t, root, name, archive, image)

	a.restart(true)
	checkArchived(t, root, name, archive, image)
	a.writeManifest("claim.yaml", claim)
	a.writeManifest("pod.yaml", writerPod)
	back := a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
	if _, err := os.Stat(filepath.Join(back.Path, "written")); !os.IsNotExist(err) {
		t.Errorf("the claim added back finds the archived data: %v", err)
	}
	if _, err := os.Lstat(archive); err != nil {
		t.Errorf("the archive after the claim came back: %v", err)
	}
}

// checkArchived wants the archive to hold the data written, detached
// (an image) or a subvolume, and its record to give its size.
func checkArchived(t *testing.T, root, name, archive string, image bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".capacity", "archived-"+name+".json"))
	if err != nil {
		t.Fatalf("record of the archive: %v", err)
	}
	var rec struct {
		Size  int64
		State string
		From  string
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.Size != 50<<20 || rec.State != "archived" || rec.From != name {
		t.Errorf("record of the archive: %s (%v); want size %d, state archived, from %s", b, err, 50<<20, name)
	}
	dir := archive
	if image {
		if out, _ := exec.Command("losetup", "-n", "-O", "NAME", "-j", archive).Output(); strings.TrimSpace(string(out)) != "" {
			t.Errorf("the archived image is attached to %s", out)
		}
		dir = t.TempDir()
		run(t, "mount", "-o", "loop,ro", archive, dir)
		defer run(t, "umount", dir)
	} else {
		var st unix.Stat_t
		if err := unix.Stat(archive, &st); err != nil || st.Ino != 256 { // a subvolume's root
			t.Errorf("the archive %s: inode %d, %v; want a subvolume", archive, st.Ino, err)
		}
	}
	checkFile(t, filepath.Join(dir, "written"), "by writer")
	if fi, err := os.Stat(filepath.Join(dir, "big")); err != nil || fi.Size() != 10<<20 {
		t.Errorf("the archive's big file: %v, %v", fi, err)
	}
}
