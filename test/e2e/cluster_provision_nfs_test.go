package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nfstest "github.com/volume-agent/volume-agent/test/nfs"
)

// nfsLease is the Lease the nfs-subdir provisioner's leader holds, in the
// namespace of deploy/daemonset.yaml (its Role grants the leases there).
const nfsLease = "volume-agent.io-nfs-subdir"

// testNFSSubdirFailover: two agents, each in its own mount namespace with
// the test mount.nfs, run the nfs-subdir provisioner; one leads. The
// leader makes a subdirectory of the userspace NFS server's export per
// claim and its PV; a pod of one node mounts it and writes to the server.
// The leader is SIGKILLed: the other agent takes the Lease within the lease
// time and serves the next claim. Deleting a claim of an archiveOnDelete
// class archives its subdirectory and deletes the PV.
func (env *clusterEnv) testNFSSubdirFailover(t *testing.T) {
	ctx := context.Background()
	ns := "prov-nfs"
	env.cp.CreateNamespace(t, ns)
	export := disk(t, "export")
	srv := nfstest.Start(t, export)
	agents := map[string]*agent{}
	for _, node := range []string{"node-nfs-a", "node-nfs-b"} {
		env.schedulableNode(t, node)
		a := newAgent(t)
		a.ns = nfstest.NewNamespace(t, nfsHelper)
		t.Cleanup(func() {
			if err := a.stop(); err != nil {
				t.Errorf("agent exit: %v", err)
			}
		})
		a.start("--kubeconfig", env.nodeKubeconfig(t, node), "--node-name", node, "--provisioners", "nfs-subdir",
			"--leader-election-namespace", "volume-agent", "--reclaim-delay", "0s")
		agents[node] = a
	}
	immediate := storagev1.VolumeBindingImmediate
	if _, err := env.client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: "va-nfs"}, Provisioner: "volume-agent.io/nfs-subdir",
		VolumeBindingMode: &immediate, ReclaimPolicy: ptr.To(v1.PersistentVolumeReclaimDelete),
		Parameters:   map[string]string{"server": "127.0.0.1", "path": "/", "archiveOnDelete": "true"},
		MountOptions: strings.Split(srv.MountOptions("soft", "timeo=10", "retrans=1"), ","),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	first := env.nfsClaim(t, ns, "first")
	leader := env.leader(t, "")
	pv := env.waitBound(t, first)
	dir := ns + "-first-" + pv.Name
	if pv.Spec.NFS == nil || pv.Spec.NFS.Server != "127.0.0.1" || pv.Spec.NFS.Path != "/"+dir {
		t.Fatalf("PV source %+v, want nfs 127.0.0.1:/%s", pv.Spec.PersistentVolumeSource, dir)
	}
	if st, err := os.Stat(filepath.Join(export, dir)); err != nil || !st.IsDir() {
		t.Fatalf("the subdirectory %s on the export: %v", dir, err)
	}

	// A pod of the leader's node mounts the subdirectory and writes to it.
	pod := unscheduledPod(ns, "app", "first")
	pod.Spec.NodeName = leader
	pod = env.createPod(t, pod)
	a := agents[leader]
	v := a.waitReady(string(pod.UID), 60*time.Second).volume("store")
	if err := os.WriteFile(a.ns.Path(filepath.Join(v.Path, "written")), []byte("by app"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(export, dir, "written"), "by app")
	if err := env.client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	a.waitPodDirGone(string(pod.UID))

	// The leader dies without releasing the Lease.
	killed := time.Now()
	a.kill()
	next := env.leader(t, leader)
	figure(t, "nfs-subdir leader SIGKILLed to the other agent leading", time.Since(killed))
	second := env.nfsClaim(t, ns, "second")
	pv2 := env.waitBound(t, second)
	figure(t, "nfs-subdir leader SIGKILLed to the next claim bound", time.Since(killed))
	if _, err := os.Stat(filepath.Join(export, ns+"-second-"+pv2.Name)); err != nil {
		t.Errorf("the new leader %s made no subdirectory: %v", next, err)
	}

	// Archive on delete, by the new leader.
	env.deletePodAndClaim(t, ns, "", "first")
	env.waitPVGone(t, pv.Name)
	checkFile(t, filepath.Join(export, ".archived", "archived-"+dir, "written"), "by app")
	got := entries(t, export)
	if slices.Contains(got, dir) || slices.ContainsFunc(got, func(e string) bool { return strings.HasPrefix(e, "archived-") }) {
		t.Errorf("the export holds %v after archiving, want neither %s nor an archive beside the volumes", got, dir)
	}
}

// nfsClaim creates a ReadWriteMany claim of class va-nfs.
func (env *clusterEnv) nfsClaim(t *testing.T, ns, name string) *v1.PersistentVolumeClaim {
	c := env.dynamicClaim(t, ns, name, "va-nfs")
	return c
}

// leader waits for an agent other than not to hold the nfs-subdir Lease
// and returns its identity (its node name).
func (env *clusterEnv) leader(t *testing.T, not string) string {
	var holder string
	waitFor(t, 60*time.Second, "an nfs-subdir leader other than "+fmt.Sprintf("%q", not), func() (bool, string) {
		l, err := env.client.CoordinationV1().Leases("volume-agent").Get(context.Background(), nfsLease, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		holder = ptr.Deref(l.Spec.HolderIdentity, "")
		return holder != "" && holder != not, holder
	})
	return holder
}

// waitBound waits for the claim to be bound and returns its PV.
func (env *clusterEnv) waitBound(t *testing.T, claim *v1.PersistentVolumeClaim) *v1.PersistentVolume {
	ctx := context.Background()
	var pv *v1.PersistentVolume
	waitFor(t, 60*time.Second, "claim "+claim.Name+" bound", func() (bool, string) {
		c, err := env.client.CoreV1().PersistentVolumeClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil || c.Status.Phase != v1.ClaimBound {
			return false, fmt.Sprint(c.Status.Phase, err)
		}
		pv, err = env.client.CoreV1().PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	return pv
}

// testNFSSubdirPatternSafety: a class whose pathPattern is a claim's label
// lets the claim's author choose the directory of the export. One agent
// leads, with the test hook pausing 3 s between the storage and the PV.
//   - A second claim whose label names the directory of a bound claim is
//     refused with an event naming the first claim's PV; the first claim's
//     data stays.
//   - A claim whose label names archived-x is refused; nothing is made.
//   - A claim whose directory holds the data of an earlier claim (Retain,
//     its PV deleted by hand) is refused with an event naming the
//     directory and the label; the data stays.
//   - A claim whose directory was made empty by hand is deleted while it
//     is provisioned: the directory stays, an event says why, and no PV
//     is left.
//   - The archive case: of a class whose pathPattern is an annotation and
//     that archives on delete, claim db (dir tenant-a/db) writes a file and
//     is deleted, so its directory is archived; claim grab of another
//     namespace (dir tenant-a) then gets tenant-a empty, and its pod sees
//     nothing of db's archive, which is in .archived. A directory holding
//     an archive an older version made next to its volume is refused.
func (env *clusterEnv) testNFSSubdirPatternSafety(t *testing.T) {
	ctx := context.Background()
	ns := "prov-nfs-pattern"
	env.cp.CreateNamespace(t, ns)
	export := disk(t, "export")
	srv := nfstest.Start(t, export)
	node := "node-nfs-pattern"
	env.schedulableNode(t, node)
	a := newAgent(t)
	a.ns = nfstest.NewNamespace(t, nfsHelper)
	a.env = []string{"VOLUME_AGENT_TEST_PROVISION_PAUSE=3s"}
	t.Cleanup(func() {
		if err := a.stop(); err != nil {
			t.Errorf("agent exit: %v", err)
		}
	})
	a.start("--kubeconfig", env.nodeKubeconfig(t, node), "--node-name", node, "--provisioners", "nfs-subdir",
		"--leader-election-namespace", "volume-agent", "--reclaim-delay", "0s")
	env.leaderIs(t, node)
	immediate := storagev1.VolumeBindingImmediate
	if _, err := env.client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: "va-nfs-pattern"}, Provisioner: "volume-agent.io/nfs-subdir",
		VolumeBindingMode: &immediate, ReclaimPolicy: ptr.To(v1.PersistentVolumeReclaimRetain),
		Parameters:   map[string]string{"server": "127.0.0.1", "path": "/", "pathPattern": "${.PVC.labels.dir}"},
		MountOptions: strings.Split(srv.MountOptions("soft", "timeo=10", "retrans=1"), ","),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("CollidingPathIsRefused", func(t *testing.T) {
		one := env.patternClaim(t, ns, "one", "shared")
		pv := env.waitBound(t, one)
		if pv.Spec.NFS == nil || pv.Spec.NFS.Path != "/shared" {
			t.Fatalf("PV source %+v, want nfs 127.0.0.1:/shared", pv.Spec.PersistentVolumeSource)
		}
		writeFile(t, filepath.Join(export, "shared", "data"), "one's")
		two := env.patternClaim(t, ns, "two", "shared")
		env.waitRefused(t, two, pv.Name)
		checkFile(t, filepath.Join(export, "shared", "data"), "one's")
	})

	t.Run("ArchivePathIsRefused", func(t *testing.T) {
		c := env.patternClaim(t, ns, "three", "archived-x")
		env.waitRefused(t, c, "archived-")
		if got := entries(t, export); slices.Contains(got, "archived-x") {
			t.Errorf("the export holds archived-x: %v", got)
		}
	})

	t.Run("LeftoverDataIsRefused", func(t *testing.T) {
		// An earlier claim's data, in a directory no PV references any more.
		old := env.patternClaim(t, ns, "old", "legacy")
		oldPV := env.waitBound(t, old)
		writeFile(t, filepath.Join(export, "legacy", "data"), "old's")
		env.deletePodAndClaim(t, ns, "", "old")
		if err := env.client.CoreV1().PersistentVolumes().Delete(ctx, oldPV.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		env.waitPVGone(t, oldPV.Name)

		taker := env.patternClaim(t, ns, "taker", "legacy")
		env.waitRefused(t, taker, `"legacy" in export 127.0.0.1:/ (from the claim's label "dir")`)
		env.waitRefused(t, taker, "taken only while it is empty")
		checkFile(t, filepath.Join(export, "legacy", "data"), "old's")
	})

	t.Run("ClaimDeletedWhileProvisioningKeepsAPreparedDirectory", func(t *testing.T) {
		if err := os.Mkdir(filepath.Join(export, "prepared"), 0o755); err != nil {
			t.Fatal(err)
		}
		late := env.patternClaim(t, ns, "late", "prepared")
		waitLog(t, a, 60*time.Second, "pausing between storage and PV", ns+"/late")
		env.deletePodAndClaim(t, ns, "", "late")
		waitLog(t, a, 30*time.Second, "claim deleted while provisioning", ns+"/late")
		kept := false
		for _, e := range claimEvents(t, env, late, "ProvisioningAbandoned") {
			kept = kept || strings.Contains(e.Message, "there before")
		}
		if !kept {
			t.Errorf("no ProvisioningAbandoned event on %s says its directory was there before", late.Name)
		}
		time.Sleep(time.Second) // a removal, or a PV created late, would show now
		if st, err := os.Stat(filepath.Join(export, "prepared")); err != nil || !st.IsDir() {
			t.Errorf("the prepared directory: %v, want it kept", err)
		}
		if _, err := env.client.CoreV1().PersistentVolumes().Get(ctx, "pvc-"+string(late.UID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("PV of the deleted claim: %v, want not found", err)
		}
	})

	t.Run("ArchiveParentGetsNothingOfTheArchive", func(t *testing.T) {
		env.testNFSSubdirArchiveParent(t, a, node, export, srv)
	})
}

// testNFSSubdirArchiveParent is the archive case of
// testNFSSubdirPatternSafety, with its agent a of node, export and server.
func (env *clusterEnv) testNFSSubdirArchiveParent(t *testing.T, a *agent, node, export string, srv *nfstest.Server) {
	ctx := context.Background()
	immediate := storagev1.VolumeBindingImmediate
	if _, err := env.client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: "va-nfs-archive"}, Provisioner: "volume-agent.io/nfs-subdir",
		VolumeBindingMode: &immediate, ReclaimPolicy: ptr.To(v1.PersistentVolumeReclaimDelete),
		Parameters:   map[string]string{"server": "127.0.0.1", "path": "/", "pathPattern": "${.PVC.annotations.dir}", "archiveOnDelete": "true"},
		MountOptions: strings.Split(srv.MountOptions("soft", "timeo=10", "retrans=1"), ","),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	victim, attacker := "prov-nfs-tenant-a", "prov-nfs-tenant-b"
	env.cp.CreateNamespace(t, victim)
	env.cp.CreateNamespace(t, attacker)

	db := env.annotatedClaim(t, victim, "db", "va-nfs-archive", "tenant-a/db")
	dbPV := env.waitBound(t, db)
	writeFile(t, filepath.Join(export, "tenant-a", "db", "secret"), "tenant-a's")
	env.deletePodAndClaim(t, victim, "", "db")
	env.waitPVGone(t, dbPV.Name)
	archive := filepath.Join(export, ".archived", "archived-"+victim+"-db-"+dbPV.Name)
	checkFile(t, filepath.Join(archive, "secret"), "tenant-a's")

	grab := env.annotatedClaim(t, attacker, "grab", "va-nfs-archive", "tenant-a")
	grabPV := env.waitBound(t, grab)
	if grabPV.Spec.NFS == nil || grabPV.Spec.NFS.Path != "/tenant-a" {
		t.Fatalf("grab's PV source %+v, want nfs 127.0.0.1:/tenant-a", grabPV.Spec.PersistentVolumeSource)
	}
	pod := unscheduledPod(attacker, "grabber", "grab")
	pod.Spec.NodeName = node
	pod = env.createPod(t, pod)
	v := a.waitReady(string(pod.UID), 60*time.Second).volume("store")
	seen, err := os.ReadDir(a.ns.Path(v.Path))
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 0 {
		var names []string
		for _, e := range seen {
			names = append(names, e.Name())
		}
		t.Errorf("grab's pod sees %v in tenant-a, want nothing of db's archive", names)
	}
	checkFile(t, filepath.Join(archive, "secret"), "tenant-a's")

	// An archive an older version made beside its volume: its directory is
	// refused, and the archive stays.
	if err := os.MkdirAll(filepath.Join(export, "tenant-c", "archived-db"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(export, "tenant-c", "archived-db", "secret"), "tenant-c's")
	grab2 := env.annotatedClaim(t, attacker, "grab2", "va-nfs-archive", "tenant-c")
	env.waitRefused(t, grab2, `holds "archived-db"`)
	checkFile(t, filepath.Join(export, "tenant-c", "archived-db", "secret"), "tenant-c's")
}

// annotatedClaim creates a ReadWriteMany claim of class with the
// annotation dir.
func (env *clusterEnv) annotatedClaim(t *testing.T, ns, name, class, dir string) *v1.PersistentVolumeClaim {
	c, err := env.client.CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{"dir": dir}},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(class),
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteMany},
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// leaderIs waits for node's agent to hold the nfs-subdir Lease.
func (env *clusterEnv) leaderIs(t *testing.T, node string) {
	waitFor(t, 60*time.Second, node+" leading nfs-subdir", func() (bool, string) {
		l, err := env.client.CoordinationV1().Leases("volume-agent").Get(context.Background(), nfsLease, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		return holder == node, holder
	})
}

// patternClaim creates a claim of class va-nfs-pattern with the label dir.
func (env *clusterEnv) patternClaim(t *testing.T, ns, name, dir string) *v1.PersistentVolumeClaim {
	c, err := env.client.CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"dir": dir}},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To("va-nfs-pattern"),
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteMany},
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitRefused waits for a ProvisioningFailed event on claim that says
// want, and checks that the claim got no PV.
func (env *clusterEnv) waitRefused(t *testing.T, claim *v1.PersistentVolumeClaim, want string) {
	t.Helper()
	waitFor(t, 30*time.Second, "a ProvisioningFailed event on "+claim.Name+" saying "+want, func() (bool, string) {
		var msgs []string
		for _, e := range claimEvents(t, env, claim, "ProvisioningFailed") {
			if strings.Contains(e.Message, want) {
				return true, ""
			}
			msgs = append(msgs, e.Message)
		}
		return false, fmt.Sprint(msgs)
	})
	if _, err := env.client.CoreV1().PersistentVolumes().Get(context.Background(), "pvc-"+string(claim.UID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("PV of the refused claim %s: %v, want not found", claim.Name, err)
	}
}

// waitLog waits for a line of the agent's log holding every one of parts.
func waitLog(t *testing.T, a *agent, timeout time.Duration, parts ...string) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("agent log line with %q", parts), func() (bool, string) {
		for _, line := range strings.Split(a.logs.String(), "\n") {
			if all(line, parts) {
				return true, ""
			}
		}
		return false, ""
	})
}

func all(line string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(line, p) {
			return false
		}
	}
	return true
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
