package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
)

// snapshotClass is the VolumeSnapshotClass the chart makes for the driver
// (csi.snapshotClass), deletionPolicy Delete.
const snapshotClass = "volume-agent-local"

func (r *csiRun) dynamic() dynamic.Interface {
	dyn, err := dynamic.NewForConfig(r.cp.AdminConfig())
	if err != nil {
		r.t.Fatal(err)
	}
	return dyn
}

// checkSnapshotAndClone snapshots claim data (written by writer), writes
// into it again, then has pod reader mount a claim restored from the
// snapshot and a clone of data, and checks by the files' hashes, as the
// containers read them, that the restore holds the snapshot's data and
// the clone the data of its own moment: what writer wrote after either
// is in neither. It returns the reader.
func (r *csiRun) checkSnapshotAndClone(writer *shellPod) *shellPod {
	t, c := r.t, r.c
	t.Helper()
	ctx := context.Background()
	atSnapshot := writer.hashes("/data")
	snaps := r.dynamic().Resource(volumeSnapshots).Namespace("e2e")
	start := time.Now()
	_, err := snaps.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": "snap"},
		"spec": map[string]any{
			"volumeSnapshotClassName": snapshotClass,
			"source":                  map[string]any{"persistentVolumeClaimName": "data"},
		},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitEvery(t, 3*time.Minute, 500*time.Millisecond, "VolumeSnapshot snap readyToUse", func() (bool, string) {
		s, err := snaps.Get(ctx, "snap", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready, _, _ := unstructured.NestedBool(s.Object, "status", "readyToUse")
		status, _, _ := unstructured.NestedMap(s.Object, "status")
		return ready, fmt.Sprint(status)
	})
	figure(t, "CSI node: VolumeSnapshot of 80 MiB, create to readyToUse", time.Since(start))

	writer.run("dd if=/dev/urandom of=/data/c bs=1M count=1 conv=fsync 2>&1")
	atClone := writer.hashes("/data")
	createClaim(t, c, claimSpec("restored", csiClass, 128, &v1.TypedLocalObjectReference{
		APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "snap"}))
	createClaim(t, c, claimSpec("cloned", csiClass, 128, &v1.TypedLocalObjectReference{
		Kind: "PersistentVolumeClaim", Name: "data"}))
	reader, took := startShellPod(t, r.n, c, shellPodSpec("reader", map[string]string{"/restored": "restored", "/cloned": "cloned"}))
	figure(t, "CSI node: pod with a restored and a cloned volume, create to Running", took)
	for _, claim := range []string{"restored", "cloned"} {
		pv := boundPV(t, c, claim)
		if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != csiDriver {
			t.Fatalf("claim %s's PV %s is not a CSI PV of %s: %+v", claim, pv.Name, csiDriver, pv.Spec.PersistentVolumeSource)
		}
		r.checkPublished(reader, pv)
	}
	writer.run("dd if=/dev/urandom of=/data/d bs=1M count=1 conv=fsync 2>&1")

	if got := reader.hashes("/restored"); !maps.Equal(got, atSnapshot) {
		t.Errorf("the claim restored from the snapshot holds %v, want the snapshot's files %v", got, atSnapshot)
	}
	if got := reader.hashes("/cloned"); !maps.Equal(got, atClone) {
		t.Errorf("the clone holds %v, want the source's files when it was made %v", got, atClone)
	}
	return reader
}

// deleteAndCheckNothingLeft deletes the pods, the snapshot and every
// claim, and checks that each PV, the VolumeSnapshotContent and the
// snapshot on the node go once the reclaim delay passed and not before
// (the driver recorded the snapshot's pending deletion meanwhile), and
// that then no VolumeSnapshotContent, snapshot or record of one,
// subvolume, qgroup or mount of the root is left and the class's capacity
// is back at room.
func (r *csiRun) deleteAndCheckNothingLeft(room int64, pods ...*shellPod) {
	t, c := r.t, r.c
	t.Helper()
	ctx := context.Background()
	for _, p := range pods {
		if err := c.CoreV1().Pods("e2e").Delete(ctx, p.pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitEvery(t, 2*time.Minute, 500*time.Millisecond, "the pods deleted", func() (bool, string) {
		list, err := c.CoreV1().Pods("e2e").List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, fmt.Sprint(err, list)
	})
	pvs := map[string]string{} // PV by claim
	for _, claim := range []string{"intree", "data", "restored", "cloned"} {
		pvs[claim] = boundPV(t, c, claim).Name
	}
	snap := r.snapshotOnNode("snap")
	if err := r.dynamic().Resource(volumeSnapshots).Namespace("e2e").Delete(ctx, "snap", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	for claim := range pvs {
		if err := c.CoreV1().PersistentVolumeClaims("e2e").Delete(ctx, claim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gone := map[string]time.Duration{} // by what went: "PV of claim …", "VolumeSnapshotContent …", "snapshot …"
	var pending time.Time              // the snapshot's deletion time, as the driver recorded it
	waitEvery(t, 5*time.Minute, 500*time.Millisecond, "every PV and the snapshot deleted", func() (bool, string) {
		var left []string
		for claim, pv := range pvs {
			what := "PV of claim " + claim
			if _, done := gone[what]; done {
				continue
			}
			got, err := c.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				gone[what] = time.Since(deleted)
				continue
			}
			if err == nil {
				left = append(left, fmt.Sprintf("%s: %s, deleting %v, finalizers %v, annotations %v",
					pv, got.Status.Phase, got.DeletionTimestamp, got.Finalizers, got.Annotations))
			}
		}
		left = append(left, r.snapshotGone(snap, deleted, gone, &pending)...)
		return len(left) == 0, fmt.Sprintf("gone %v; left %q", gone, left)
	})
	// The agent records when a released volume or a snapshot is due in
	// whole seconds (RFC 3339, on the PV or in its records): up to a second
	// of the delay may be lost to that rounding, never more.
	for what, after := range gone {
		if after < csiReclaimDelay-time.Second {
			t.Errorf("the %s went %v after its deletion was asked for, before the reclaim delay of %v", what, after, csiReclaimDelay)
		}
	}
	if pending.IsZero() {
		t.Errorf("snapshot %s: the driver never recorded its pending deletion (%s with deleteAt) while it was on the node", snap.handle, snap.csiRecord)
	}
	figure(t, "CSI node: last PV deleted after its claim", slicesMax(gone, "PV of claim "))
	figure(t, "CSI node: snapshot deleted from the node after its VolumeSnapshot", gone["snapshot "+snap.handle])
	r.checkDeleteRefused(pvs["data"])
	r.waitNoSnapshotContents()
	r.waitNoSnapshots()
	r.waitRootEmpty()
	r.waitCapacity(room)
}

// nodeSnapshot is a VolumeSnapshot's snapshot as the node holds it.
type nodeSnapshot struct {
	content string // its VolumeSnapshotContent
	handle  string // the CSI snapshot ID: the backend's name
	// On the node: the snapshot's subvolume, the capacity backend's
	// record of it, and the CSI driver's.
	dir, capacityRecord, csiRecord string
}

// snapshotOnNode returns the snapshot of the ready VolumeSnapshot name,
// and checks that the node holds it: its subvolume and both records.
func (r *csiRun) snapshotOnNode(name string) nodeSnapshot {
	t := r.t
	t.Helper()
	ctx := context.Background()
	vs, err := r.dynamic().Resource(volumeSnapshots).Namespace("e2e").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	content, _, _ := unstructured.NestedString(vs.Object, "status", "boundVolumeSnapshotContentName")
	vsc, err := r.dynamic().Resource(volumeSnapshotContents).Get(ctx, content, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("VolumeSnapshot %s's content %q: %v", name, content, err)
	}
	handle, _, _ := unstructured.NestedString(vsc.Object, "status", "snapshotHandle")
	if handle == "" || strings.Contains(handle, "/") {
		t.Fatalf("VolumeSnapshotContent %s: snapshotHandle %q", content, handle)
	}
	s := nodeSnapshot{content: content, handle: handle,
		dir:            filepath.Join(nodeLocalRoot, ".snapshots", handle),
		capacityRecord: filepath.Join(nodeLocalRoot, ".capacity", "snapshots", handle+".json"),
		csiRecord:      filepath.Join(nodeLocalRoot, ".csi", "snapshots", handle+".json"),
	}
	for _, p := range []string{s.dir, s.capacityRecord, s.csiRecord} {
		if _, err := os.Lstat(r.n.Path(p)); err != nil {
			t.Fatalf("snapshot %s of VolumeSnapshot %s is not on the node: %v", handle, name, err)
		}
	}
	return s
}

// snapshotGone notes in gone, by the time since deleted, the
// VolumeSnapshotContent and the snapshot on the node (its subvolume and
// both records) once each is gone, and in pending the deletion time the
// driver's record shows while the snapshot is there; it returns what is
// left.
func (r *csiRun) snapshotGone(s nodeSnapshot, deleted time.Time, gone map[string]time.Duration, pending *time.Time) []string {
	var left []string
	if _, done := gone["VolumeSnapshotContent "+s.content]; !done {
		_, err := r.dynamic().Resource(volumeSnapshotContents).Get(context.Background(), s.content, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			gone["VolumeSnapshotContent "+s.content] = time.Since(deleted)
		case err != nil:
			left = append(left, "VolumeSnapshotContent "+s.content+": "+err.Error())
		default:
			left = append(left, "VolumeSnapshotContent "+s.content)
		}
	}
	if _, done := gone["snapshot "+s.handle]; done {
		return left
	}
	if b, err := os.ReadFile(r.n.Path(s.csiRecord)); err == nil {
		var rec struct {
			DeleteAt *time.Time `json:"deleteAt"`
		}
		if json.Unmarshal(b, &rec) == nil && rec.DeleteAt != nil && pending.IsZero() {
			*pending = *rec.DeleteAt
		}
	}
	var there []string
	for _, p := range []string{s.dir, s.capacityRecord, s.csiRecord} {
		if _, err := os.Lstat(r.n.Path(p)); !os.IsNotExist(err) {
			there = append(there, p)
		}
	}
	if len(there) == 0 {
		gone["snapshot "+s.handle] = time.Since(deleted)
		return left
	}
	return append(left, fmt.Sprintf("snapshot %s: %v (deletion recorded for %v)", s.handle, there, *pending))
}

// checkDeleteRefused checks that the external-provisioner's DeleteVolume
// of the CSI PV was refused until the reclaim delay ended: its
// VolumeFailedDelete event names the delay and how to keep the volume.
func (r *csiRun) checkDeleteRefused(pv string) {
	r.t.Helper()
	list, err := r.c.CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + pv + ",reason=VolumeFailedDelete"})
	if err != nil {
		r.t.Fatal(err)
	}
	for _, e := range list.Items {
		if strings.Contains(e.Message, "--reclaim-delay") && strings.Contains(e.Message, "Retain") {
			return
		}
	}
	r.t.Errorf("PV %s: no VolumeFailedDelete event naming the reclaim delay and Retain: %v", pv, list.Items)
}

// slicesMax is the longest of the durations in m whose key starts with
// prefix.
func slicesMax(m map[string]time.Duration, prefix string) time.Duration {
	var most time.Duration
	for k, d := range m {
		if strings.HasPrefix(k, prefix) {
			most = max(most, d)
		}
	}
	return most
}

// waitNoSnapshots waits until the node's local path root holds no
// snapshot and no record of one: the capacity backend's snapshots'
// directory and records, and the CSI driver's records.
func (r *csiRun) waitNoSnapshots() {
	r.t.Helper()
	dirs := []string{filepath.Join(nodeLocalRoot, ".snapshots"), filepath.Join(nodeLocalRoot, ".capacity", "snapshots"),
		filepath.Join(nodeLocalRoot, ".csi", "snapshots")}
	waitEvery(r.t, time.Minute, time.Second, "no snapshot or snapshot record left in "+nodeLocalRoot, func() (bool, string) {
		var left []string
		for _, d := range dirs {
			des, err := os.ReadDir(r.n.Path(d))
			if err != nil && !os.IsNotExist(err) {
				return false, err.Error()
			}
			for _, de := range des {
				left = append(left, filepath.Join(d, de.Name()))
			}
		}
		return len(left) == 0, fmt.Sprint(left)
	})
}

// waitNoSnapshotContents waits until no VolumeSnapshotContent is left.
func (r *csiRun) waitNoSnapshotContents() {
	r.t.Helper()
	contents := r.dynamic().Resource(volumeSnapshotContents)
	waitEvery(r.t, 3*time.Minute, time.Second, "no VolumeSnapshotContent left", func() (bool, string) {
		list, err := contents.List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, o := range list.Items {
			names = append(names, o.GetName())
		}
		return len(names) == 0, fmt.Sprint(names)
	})
}

// waitRootEmpty waits until the btrfs root holds no subvolume, no qgroup
// but the top level's, and no mount of it is left on the node but the
// root itself.
func (r *csiRun) waitRootEmpty() {
	r.t.Helper()
	waitEvery(r.t, 2*time.Minute, time.Second, "no subvolume, qgroup or mount left in "+nodeLocalRoot, func() (bool, string) {
		subs, qgroups := nodeSubvolumes(r.t, r.n, nodeLocalRoot)
		mounts, err := r.n.Mounts()
		if err != nil {
			r.t.Fatal(err)
		}
		var left []string
		for _, m := range mounts {
			if m.FSType == "btrfs" && m.Mountpoint != nodeLocalRoot && strings.HasPrefix(m.Source, "/dev/loop") {
				left = append(left, m.Mountpoint+" ("+m.Root+")")
			}
		}
		return len(subs)+len(qgroups)+len(left) == 0, fmt.Sprintf("subvolumes %v, qgroups %v, mounts %v", subs, qgroups, left)
	})
}

// waitCapacity waits for the one CSIStorageCapacity of the CSI class on
// the node and returns its capacity: any (want < 0), or within 1 % of
// want (the root's free space moves by what btrfs keeps for itself).
func (r *csiRun) waitCapacity(want int64) int64 {
	r.t.Helper()
	var got int64
	what := fmt.Sprintf("the CSIStorageCapacity of class %s on node %s", csiClass, r.n.Name())
	if want >= 0 {
		what += fmt.Sprintf(" back at %d bytes", want)
	}
	waitEvery(r.t, 3*time.Minute, time.Second, what, func() (bool, string) {
		list, err := r.c.StorageV1().CSIStorageCapacities("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var mine []string
		found := 0
		for _, o := range list.Items {
			if o.StorageClassName != csiClass {
				continue
			}
			mine = append(mine, fmt.Sprintf("%s/%s %v %v", o.Namespace, o.Name, o.NodeTopology, o.Capacity))
			if o.NodeTopology != nil && o.NodeTopology.MatchLabels[v1.LabelHostname] == r.n.Name() && o.Capacity != nil {
				found++
				got = o.Capacity.Value()
			}
		}
		ok := found == 1 && (want < 0 || math.Abs(float64(got-want)) <= 0.01*float64(want))
		return ok, fmt.Sprint(mine)
	})
	return got
}
