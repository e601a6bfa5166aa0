package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Manifests of manifest mode's snapshots and clones: a VolumeSnapshot of
// claim "data" (enforcedClaim, 100Mi of enforcedClass), claims made from
// it or from "data", and pods that use them as volume "store".
const (
	snapshotManifest = `
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata: {name: snap, uid: %s}
spec:
  source: {persistentVolumeClaimName: data}
`
	restoreClaim = `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %s}
spec:
  storageClassName: %s
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 100Mi}}
  dataSourceRef: {apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: snap}
`
	cloneClaim = `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %s}
spec:
  storageClassName: sized
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 100Mi}}
  dataSource: {kind: PersistentVolumeClaim, name: data}
`
	podOfClaim = `
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  containers: [{name: c, image: busybox}]
  volumes: [{name: store, persistentVolumeClaim: {claimName: %s}}]
`
	plainClass = `
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: plain}
provisioner: local.volume-agent.io
volumeBindingMode: WaitForFirstConsumer
parameters: {enforce: "false"}
`
)

// apiSnapshot is a VolumeSnapshot as served by /v1/claims.
type apiSnapshot struct {
	Namespace, Name, UID, Claim, PV, Snapshot, RestoreSize, Error string
	ReadyToUse, Removed, Deleting                                 bool
	DeleteAfter                                                   *time.Time
}

// apiSourcedClaim is a claim as served by /v1/claims, with its data source.
type apiSourcedClaim struct {
	Name, Phase, PV, DataSource, Error string
}

// claimsAndSnapshots returns the claims and snapshots of /v1/claims.
func (a *agent) claimsAndSnapshots() ([]apiSourcedClaim, []apiSnapshot) {
	a.t.Helper()
	code, body := a.get("/v1/claims")
	if code != 200 {
		a.t.Fatalf("/v1/claims: %d %s", code, body)
	}
	var out struct {
		Claims    []apiSourcedClaim
		Snapshots []apiSnapshot
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		a.t.Fatalf("/v1/claims: %v: %s", err, body)
	}
	return out.Claims, out.Snapshots
}

// snapshotsNamed returns the entries of VolumeSnapshot name in /v1/claims.
func (a *agent) snapshotsNamed(name string) []apiSnapshot {
	a.t.Helper()
	_, snaps := a.claimsAndSnapshots()
	var out []apiSnapshot
	for _, s := range snaps {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// waitSnapshot waits until VolumeSnapshot name shows one entry for which
// cond holds, and returns it.
func (a *agent) waitSnapshot(name string, timeout time.Duration, what string, cond func(apiSnapshot) bool) apiSnapshot {
	a.t.Helper()
	var got apiSnapshot
	waitFor(a.t, timeout, what, func() (bool, string) {
		s := a.snapshotsNamed(name)
		if len(s) != 1 {
			return false, fmt.Sprintf("%+v", s)
		}
		got = s[0]
		return cond(got), fmt.Sprintf("%+v", got)
	})
	return got
}

func readyToUse(s apiSnapshot) bool { return s.ReadyToUse }

// writeIn writes content to file name of a pod's volume.
func writeIn(t *testing.T, v apiVolume, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(v.Path, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkMissing fails unless file name of a pod's volume does not exist.
func checkMissing(t *testing.T, v apiVolume, name string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(v.Path, name)); !os.IsNotExist(err) {
		t.Errorf("%s in the volume of claim %s: %v; want it missing", name, v.Claim, err)
	}
}

// subvolumes lists the btrfs subvolumes under root, by path.
func subvolumes(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.Command("btrfs", "subvolume", "list", "-o", root).CombinedOutput()
	if err != nil {
		t.Fatalf("btrfs subvolume list: %v: %s", err, out)
	}
	return string(out)
}

// startSnapshots starts an agent whose local provisioner has the btrfs
// root root, with class "sized", claim "data" used by pod "writer", and
// returns that pod's volume.
func startSnapshots(t *testing.T, a *agent, root string, extra ...string) apiVolume {
	t.Helper()
	a.start(append([]string{"--provisioners", "local", "--local-path-root", root}, extra...)...)
	a.writeManifest("class.yaml", enforcedClass)
	a.writeManifest("claim.yaml", enforcedClaim)
	a.writeManifest("pod.yaml", writerPod)
	return a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
}

// TestManifestSnapshotRestoreAndClone: a VolumeSnapshot of a claim holds
// the data of its moment: a claim restored from it does, not what was
// written after; a clone holds the claim's data of the clone's moment.
// The snapshot and its readiness survive SIGKILL and SIGTERM. A
// VolumeSnapshot made again under its name with another UID is a new
// snapshot, with the data of its own moment. A class of plain
// directories is refused. On btrfs: subvolume snapshots.
func TestManifestSnapshotRestoreAndClone(t *testing.T) {
	checkRestoreAndClone(t, btrfsLocalRoot(t, true))
}

// TestManifestSnapshotRestoreAndCloneOnImages: the same with ext4 image
// volumes (reflink or sparse copies).
func TestManifestSnapshotRestoreAndCloneOnImages(t *testing.T) {
	checkRestoreAndClone(t, imageLocalRoot(t))
}

// TestManifestSnapshotRestoreAndCloneThroughSymlink: the same with
// --local-path-root reached through a symlink, as on nodes whose data disk
// is linked into place: the agent resolves it once, and its snapshots,
// restores and deletions work below the resolved root.
func TestManifestSnapshotRestoreAndCloneThroughSymlink(t *testing.T) {
	root := btrfsLocalRoot(t, true)
	link := filepath.Join(t.TempDir(), "local")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	checkRestoreAndClone(t, link)
}

func checkRestoreAndClone(t *testing.T, root string) {
	a := newAgent(t)
	v := startSnapshots(t, a, root, "--reclaim-delay", "0s")
	writeIn(t, v, "state", "before")
	a.writeManifest("snapshot.yaml", fmt.Sprintf(snapshotManifest, "s1"))
	first := a.waitSnapshot("snap", 60*time.Second, "snapshot ready", readyToUse)
	if first.Claim != "data" || first.PV != v.PV || first.RestoreSize != "100Mi" || first.Snapshot == "" {
		t.Errorf("snapshot %+v; want of claim data, PV %s, 100Mi", first, v.PV)
	}
	writeIn(t, v, "state", "after")
	writeIn(t, v, "later", "written after the snapshot")

	for _, crash := range []bool{true, false} {
		a.restart(crash)
		again := a.waitSnapshot("snap", 60*time.Second, fmt.Sprintf("snapshot ready after a restart (SIGKILL: %t)", crash), readyToUse)
		if again.Snapshot != first.Snapshot {
			t.Errorf("after a restart (SIGKILL: %t) the snapshot is %q, want %q", crash, again.Snapshot, first.Snapshot)
		}
	}

	a.writeManifest("restored.yaml", fmt.Sprintf(restoreClaim, "restored", "sized")+"---"+fmt.Sprintf(podOfClaim, "reader", "restored"))
	a.writeManifest("clone.yaml", fmt.Sprintf(cloneClaim, "copy")+"---"+fmt.Sprintf(podOfClaim, "copier", "copy"))
	restored := a.waitPod("default", "reader", 60*time.Second, ready).volume("store")
	clone := a.waitPod("default", "copier", 60*time.Second, ready).volume("store")
	checkFile(t, filepath.Join(restored.Path, "state"), "before")
	checkMissing(t, restored, "later")
	checkFile(t, filepath.Join(clone.Path, "state"), "after")
	checkFile(t, filepath.Join(clone.Path, "later"), "written after the snapshot")
	writeIn(t, restored, "own", "the restore's own")
	checkMissing(t, v, "own")
	claims, _ := a.claimsAndSnapshots()
	for _, c := range claims {
		switch want := map[string]string{"restored": "VolumeSnapshot snap", "copy": "PersistentVolumeClaim data"}[c.Name]; {
		case want != "" && (c.DataSource != want || c.Phase != "Bound"):
			t.Errorf("claim %+v; want Bound, from %s", c, want)
		}
	}

	// The same name, another UID: a new snapshot, of the data now.
	writeIn(t, v, "state", "second")
	a.writeManifest("snapshot.yaml", fmt.Sprintf(snapshotManifest, "s2"))
	second := a.waitSnapshot("snap", 60*time.Second, "the new snapshot ready, the old one deleted", func(s apiSnapshot) bool {
		return s.ReadyToUse && s.UID == "s2"
	})
	if second.Snapshot == first.Snapshot {
		t.Fatalf("the VolumeSnapshot of a new UID got the old snapshot %q", first.Snapshot)
	}
	a.writeManifest("restored2.yaml", fmt.Sprintf(restoreClaim, "restored2", "sized")+"---"+fmt.Sprintf(podOfClaim, "reader2", "restored2"))
	checkFile(t, filepath.Join(a.waitPod("default", "reader2", 60*time.Second, ready).volume("store").Path, "state"), "second")

	// A class of plain directories makes no volume from a data source.
	a.writeManifest("plain.yaml", plainClass+"---"+fmt.Sprintf(restoreClaim, "flat", "plain")+"---"+fmt.Sprintf(podOfClaim, "flatpod", "flat"))
	waitFor(t, 30*time.Second, "the plain-directory restore refused", func() (bool, string) {
		c := claimOf(a.claims(), "flat")
		return c.Phase == "Pending" && strings.Contains(c.Error, `makes plain directories (enforce "false")`), fmt.Sprintf("%+v", c)
	})
}

// TestManifestSnapshotDeletedAfterReclaimDelay: a snapshot whose
// VolumeSnapshot is removed from the manifests is kept for
// --reclaim-delay, shown with when it is deleted, and kept when the
// VolumeSnapshot comes back; an agent started on an emptied manifest
// directory deletes nothing, whatever the delay; once the manifests list
// objects again without the VolumeSnapshot, it is deleted after the
// delay.
func TestManifestSnapshotDeletedAfterReclaimDelay(t *testing.T) {
	root := btrfsLocalRoot(t, true)
	a := newAgent(t)
	v := startSnapshots(t, a, root, "--reclaim-delay", "1h")
	writeIn(t, v, "state", "kept")
	a.writeManifest("snapshot.yaml", fmt.Sprintf(snapshotManifest, "s1"))
	snap := a.waitSnapshot("snap", 60*time.Second, "snapshot ready", readyToUse)
	withSnapshot := subvolumes(t, root)
	if !strings.Contains(withSnapshot, snap.Snapshot) {
		t.Fatalf("subvolumes %s lack the snapshot %s", withSnapshot, snap.Snapshot)
	}
	removedAt := time.Now()
	a.removeManifest("snapshot.yaml")
	removed := a.waitSnapshot("snap", 30*time.Second, "snapshot removed, kept", func(s apiSnapshot) bool { return s.Removed && s.DeleteAfter != nil })
	if removed.DeleteAfter.Before(removedAt.Add(59*time.Minute)) || !removed.ReadyToUse {
		t.Errorf("removed snapshot %+v; want kept, ready, for an hour", removed)
	}
	if !strings.Contains(subvolumes(t, root), snap.Snapshot) {
		t.Errorf("the snapshot is gone within the reclaim delay")
	}
	a.writeManifest("snapshot.yaml", fmt.Sprintf(snapshotManifest, "s1"))
	back := a.waitSnapshot("snap", 30*time.Second, "snapshot back, kept", func(s apiSnapshot) bool { return !s.Removed && s.DeleteAfter == nil })
	if back.Snapshot != snap.Snapshot || !back.ReadyToUse {
		t.Errorf("the VolumeSnapshot back shows %+v, want its snapshot %s, ready", back, snap.Snapshot)
	}

	// Started on an emptied directory, no reclaim delay: kept.
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	aside := t.TempDir()
	for _, name := range []string{"class.yaml", "claim.yaml", "pod.yaml", "snapshot.yaml"} {
		if err := os.Rename(filepath.Join(a.manifests, name), filepath.Join(aside, name)); err != nil {
			t.Fatal(err)
		}
	}
	a.start("--provisioners", "local", "--local-path-root", root, "--reclaim-delay", "0s")
	a.waitSnapshot("snap", 30*time.Second, "the removal not counted in an emptied directory", func(s apiSnapshot) bool {
		return s.Removed && s.DeleteAfter == nil && strings.Contains(s.Error, "a source that lists nothing removes nothing")
	})
	if !strings.Contains(subvolumes(t, root), snap.Snapshot) {
		t.Errorf("the snapshot was deleted by an emptied manifest directory")
	}

	// The manifests back, the delay passed: deleted.
	for _, name := range []string{"class.yaml", "claim.yaml", "pod.yaml"} {
		if err := os.Rename(filepath.Join(aside, name), filepath.Join(a.manifests, name)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 60*time.Second, "the snapshot deleted", func() (bool, string) {
		left := subvolumes(t, root)
		return len(a.snapshotsNamed("snap")) == 0 && !strings.Contains(left, snap.Snapshot), left
	})
	checkFile(t, filepath.Join(a.waitPod("default", "writer", 60*time.Second, ready).volume("store").Path, "state"), "kept")
}

// TestManifestSnapshotKeptWhileRestoring: a snapshot whose VolumeSnapshot
// is removed is not deleted while a claim is being restored from it
// (VOLUME_AGENT_TEST_PROVISION_PAUSE holds the restore between making its
// storage and recording its PersistentVolume), and is deleted once the
// restore is recorded; the restored claim has the data.
func TestManifestSnapshotKeptWhileRestoring(t *testing.T) {
	root := btrfsLocalRoot(t, true)
	a := newAgent(t)
	a.env = []string{"VOLUME_AGENT_TEST_PROVISION_PAUSE=8s"}
	v := startSnapshots(t, a, root, "--reclaim-delay", "0s")
	writeIn(t, v, "state", "restored")
	a.writeManifest("snapshot.yaml", fmt.Sprintf(snapshotManifest, "s1"))
	snap := a.waitSnapshot("snap", 60*time.Second, "snapshot ready", readyToUse)
	a.writeManifest("restored.yaml", fmt.Sprintf(restoreClaim, "restored", "sized")+"---"+fmt.Sprintf(podOfClaim, "reader", "restored"))
	waitFor(t, 30*time.Second, "the restore under way", func() (bool, string) {
		c := claimOf(a.claims(), "restored")
		return strings.Contains(c.Error, "provisioning PersistentVolume"), fmt.Sprintf("%+v", c)
	})
	a.removeManifest("snapshot.yaml")
	a.waitSnapshot("snap", 30*time.Second, "the deletion held for the restore", func(s apiSnapshot) bool {
		return s.Removed && strings.Contains(s.Error, "not deleted while claim default/restored is being restored from it")
	})
	if !strings.Contains(subvolumes(t, root), snap.Snapshot) {
		t.Errorf("the snapshot was deleted while a claim was being restored from it")
	}
	checkFile(t, filepath.Join(a.waitPod("default", "reader", 60*time.Second, ready).volume("store").Path, "state"), "restored")
	waitFor(t, 60*time.Second, "the snapshot deleted once the restore is recorded", func() (bool, string) {
		left := subvolumes(t, root)
		return len(a.snapshotsNamed("snap")) == 0 && !strings.Contains(left, snap.Snapshot), left
	})
}

// TestManifestSnapshotSIGKILLLeavesNothingBehind: the agent killed
// (SIGKILL) at varying moments of taking snapshots and of restoring from
// them finishes each after its restart, the restored data intact, and,
// every VolumeSnapshot and restored claim removed, deletes every snapshot
// and volume it made: no subvolume is left that no record knows.
func TestManifestSnapshotSIGKILLLeavesNothingBehind(t *testing.T) {
	root := btrfsLocalRoot(t, true)
	a := newAgent(t)
	v := startSnapshots(t, a, root, "--reclaim-delay", "0s")
	for i := range 4 {
		writeIn(t, v, "state", fmt.Sprint("moment ", i))
		a.writeManifest("snapshot.yaml", fmt.Sprintf(snapshotManifest, fmt.Sprint("s", i)))
		time.Sleep(time.Duration(i) * 40 * time.Millisecond) // cut at a different step each time
		a.kill()
		a.start(a.extra...)
		a.waitSnapshot("snap", 60*time.Second, fmt.Sprint("snapshot ", i, " ready after SIGKILL"), func(s apiSnapshot) bool {
			return s.ReadyToUse && s.UID == fmt.Sprint("s", i)
		})
		name := fmt.Sprint("restored", i)
		a.writeManifest(name+".yaml", fmt.Sprintf(restoreClaim, name, "sized")+"---"+fmt.Sprintf(podOfClaim, "reader"+fmt.Sprint(i), name))
		time.Sleep(time.Duration(i) * 40 * time.Millisecond)
		a.kill()
		a.start(a.extra...)
		restored := a.waitPod("default", "reader"+fmt.Sprint(i), 60*time.Second, ready).volume("store")
		checkFile(t, filepath.Join(restored.Path, "state"), fmt.Sprint("moment ", i))
		v = a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
		a.removeManifest(name + ".yaml") // deleted at once (no reclaim delay): the root has room for a few volumes only
	}
	a.removeManifest("snapshot.yaml")
	waitFor(t, 120*time.Second, "every snapshot and restored volume deleted", func() (bool, string) {
		left := subvolumes(t, root)
		_, snaps := a.claimsAndSnapshots()
		return len(snaps) == 0 && strings.Count(strings.TrimSpace(left), "\n") == 0 && strings.Contains(left, v.PV), left
	})
	checkFile(t, filepath.Join(v.Path, "state"), "moment 3")
}
