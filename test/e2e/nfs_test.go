package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	nfstest "github.com/volume-agent/volume-agent/test/nfs"
)

// These tests run the agent in a private mount namespace where
// /sbin/mount.nfs is the test helper of test/nfs: `mount -t nfs` — the
// agent's production path, through k8s.io/mount-utils and util-linux's
// mount(8) — mounts the export of a userspace NFSv3 server on loopback
// through FUSE, over a real NFS protocol connection. The kernel here has no
// NFS client. The tests prove the agent's mount path and data flow; they do
// not look at the file system type.

// nfsStorage is an NFS PV of the test server's export and a claim for it.
const nfsStorage = `
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-nfs}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteMany]
  mountOptions: [%s]
  nfs: {server: "127.0.0.1", path: "/"}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: shared}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  resources: {requests: {storage: 1Gi}}
`

const nfsPod = `
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  containers: [{name: c, image: busybox}]
  volumes: [{name: share, persistentVolumeClaim: {claimName: shared, readOnly: %v}}]
`

// nfsEnv is an agent in a private mount namespace, and an NFS server.
type nfsEnv struct {
	a      *agent
	srv    *nfstest.Server
	export string
}

// startNFS prepares an agent that runs in a private mount namespace with
// the test mount.nfs, an NFS server exporting a fresh directory, and the
// manifests of an NFS PV and its claim. Start the agent with env.a.start.
func startNFS(t *testing.T, serverOpts ...nfstest.Option) *nfsEnv {
	a := newAgent(t)
	symlinkedRoot(t, a) // as a symlinked /var/lib would
	export := disk(t, "export")
	a.ns = nfstest.NewNamespace(t, nfsHelper)
	srv := nfstest.Start(t, export, serverOpts...)
	// Registered last, so it runs first: the agent stops before the
	// server and the namespace go.
	t.Cleanup(func() {
		if err := a.stop(); err != nil {
			t.Errorf("agent exit: %v", err)
		}
	})
	a.writeManifest("storage.yaml", fmt.Sprintf(nfsStorage, srv.MountOptions("soft", "timeo=10", "retrans=1")))
	return &nfsEnv{a: a, srv: srv, export: export}
}

// in returns where the test finds path of the agent's mount namespace.
func (e *nfsEnv) in(path string) string { return e.a.ns.Path(path) }

// mountIDs renders the mounts below the agent's root in its namespace.
func (e *nfsEnv) mountIDs(t *testing.T) string {
	mounts, err := e.a.ns.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range mounts {
		if strings.HasPrefix(m.Mountpoint, e.a.resolvedRoot()+"/") {
			ids = append(ids, fmt.Sprintf("%d:%s", m.ID, m.Mountpoint))
		}
	}
	if len(ids) == 0 {
		t.Fatal("no mounts below the root in the agent's namespace")
	}
	return strings.Join(ids, ",")
}

func (e *nfsEnv) mounted(t *testing.T, dir string) bool {
	_, ok := e.a.ns.Mount(dir)
	return ok
}

// TestNFSVolumesMountTheExport: an NFS PV through a claim, read-write and
// read-only, and an inline nfs: volume are mounted through mount.nfs; what
// a pod writes reaches the export; teardown unmounts and deletes nothing
// on the server.
func TestNFSVolumesMountTheExport(t *testing.T) {
	e := startNFS(t)
	inlineExport := disk(t, "inline")
	nfstest.Start(t, inlineExport, nfstest.OnPort(2049)) // no mount options: the NFS port
	a := e.a
	a.writeManifest("pods.yaml", fmt.Sprintf(nfsPod, "db", false)+"---"+fmt.Sprintf(nfsPod, "reader", true)+`---
apiVersion: v1
kind: Pod
metadata: {name: inline}
spec:
  containers: [{name: c, image: busybox}]
  volumes: [{name: share, nfs: {server: "127.0.0.1", path: "/", readOnly: false}}]
`)
	a.start()
	db := a.waitPod("default", "db", 20*time.Second, ready)
	reader := a.waitPod("default", "reader", 20*time.Second, ready)
	inline := a.waitPod("default", "inline", 20*time.Second, ready)

	v := db.volume("share")
	if want := filepath.Join(a.resolvedRoot(), "pods", db.UID, "volumes", "kubernetes.io~nfs", "pv-nfs"); v.Path != want || v.PV != "pv-nfs" || v.Claim != "shared" {
		t.Fatalf("db's volume = %+v; want pv-nfs at %s", v, want)
	}
	if want := filepath.Join(a.resolvedRoot(), "pods", inline.UID, "volumes", "kubernetes.io~nfs", "share"); inline.volume("share").Path != want {
		t.Fatalf("inline volume at %s, want %s", inline.volume("share").Path, want)
	}
	for _, p := range []apiPod{db, reader, inline} {
		if !e.mounted(t, p.volume("share").Path) {
			t.Fatalf("pod %s: nothing mounted at %s", p.Name, p.volume("share").Path)
		}
	}
	checkFile(t, e.in(filepath.Join(v.Path, "label")), "export")
	checkFile(t, e.in(filepath.Join(inline.volume("share").Path, "label")), "inline")
	if err := os.WriteFile(e.in(filepath.Join(v.Path, "from-db")), []byte("db data"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(e.export, "from-db"), "db data")
	checkFile(t, e.in(filepath.Join(reader.volume("share").Path, "from-db")), "db data")
	err := os.WriteFile(e.in(filepath.Join(reader.volume("share").Path, "nope")), nil, 0o644)
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write through a read-only claim volume: %v, want EROFS", err)
	}

	// Restarts neither remount nor disturb the mounts.
	ids := e.mountIDs(t)
	for _, crash := range []bool{false, true} {
		a.restart(crash)
		a.waitPod("default", "db", 20*time.Second, ready)
		if after := e.mountIDs(t); after != ids {
			t.Fatalf("restart (crash %v) changed the NFS mounts: %v -> %v", crash, ids, after)
		}
	}

	sums := checksums(t, e.export)
	a.writeManifest("pods.yaml", fmt.Sprintf(nfsPod, "reader", true))
	a.waitPodDirGone(db.UID)
	a.waitPodDirGone(inline.UID)
	if e.mounted(t, v.Path) {
		t.Fatal("db's NFS mount is still there")
	}
	checkData(t, "export", e.export, sums)
	checkFile(t, filepath.Join(inlineExport, "label"), "inline")
}

// TestNFSServerDeathAndRecovery: the server stops answering while mounted.
// The volume turns Failed within its deadline while other pods are served
// and the endpoint answers at once; the server comes back and the volume
// heals; with the server dead again, teardown takes the mount down and
// deletes nothing on the server.
func TestNFSServerDeathAndRecovery(t *testing.T) {
	e := startNFS(t)
	a := e.a
	a.writeManifest("pods.yaml", fmt.Sprintf(nfsPod, "db", false))
	a.start("--volume-check-period=1s")
	db := a.waitPod("default", "db", 20*time.Second, ready)
	dir := db.volume("share").Path
	if err := os.WriteFile(e.in(filepath.Join(dir, "before")), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}

	e.srv.Stop()
	start := time.Now()
	a.waitPod("default", "db", 30*time.Second, func(p apiPod) bool { return p.volume("share").State == "Failed" })
	figure(t, "NFS server stopped to its volume Failed (check period 1 s, soft, 3 s per request)", time.Since(start))
	a.writeManifest("other.yaml", fmt.Sprintf(twoVolumePod, "  - {name: data, emptyDir: {}}\n"))
	a.waitPod("default", "keeper", 10*time.Second, ready)
	slowest := checkAnswersFast(t, a, 3*time.Second)
	figure(t, "slowest /healthz or /v1/pods answer with the NFS server dead", slowest)

	e.srv.Restart()
	start = time.Now()
	a.waitPod("default", "db", 60*time.Second, ready)
	figure(t, "NFS server back to its volume ready again", time.Since(start))
	checkFile(t, e.in(filepath.Join(dir, "before")), "kept")

	e.srv.Stop()
	sums := checksums(t, e.export)
	start = time.Now()
	a.removeManifest("pods.yaml")
	a.waitPodDirGone(db.UID)
	figure(t, "pod removed to its dead NFS mount taken down", time.Since(start))
	if e.mounted(t, dir) {
		t.Fatal("the dead NFS mount is still there")
	}
	checkData(t, "export", e.export, sums)
	checkFile(t, filepath.Join(e.export, "before"), "kept")
}

// checkAnswersFast asks /healthz and /v1/pods every 100 ms for d and fails
// if an answer takes a second or more; it returns the slowest.
func checkAnswersFast(t *testing.T, a *agent, d time.Duration) time.Duration {
	t.Helper()
	var slowest time.Duration
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		for _, path := range []string{"/healthz", "/v1/pods"} {
			start := time.Now()
			code, body := a.get(path)
			took := time.Since(start)
			slowest = max(slowest, took)
			if code != 200 || took >= time.Second {
				t.Fatalf("%s answered %d in %v: %s", path, code, took, strings.TrimSpace(body))
			}
		}
	}
	return slowest
}

// TestNFSHardMountOutage: with a hard mount, a stat on a dead server waits
// until the server is back. The agent notices the outage by the check's
// deadline, keeps serving, and heals the volume when the server returns.
// (Checks of one mount also share the stat in flight, so that a kernel
// client, which only SIGKILL interrupts, holds one thread per mount over a
// long outage; the test helper lets any signal interrupt a hard request,
// so that cannot be seen here.)
func TestNFSHardMountOutage(t *testing.T) {
	e := startNFS(t)
	a := e.a
	a.writeManifest("storage.yaml", fmt.Sprintf(nfsStorage, e.srv.MountOptions("hard", "timeo=10")))
	a.writeManifest("pods.yaml", fmt.Sprintf(nfsPod, "db", false))
	a.start("--volume-check-period=1s")
	a.waitPod("default", "db", 20*time.Second, ready)

	e.srv.Stop()
	a.waitPod("default", "db", 30*time.Second, func(p apiPod) bool {
		return p.volume("share").State == "Failed" && strings.Contains(p.volume("share").Error, "does not answer")
	})
	checkAnswersFast(t, a, 3*time.Second)
	e.srv.Restart()
	a.waitPod("default", "db", 60*time.Second, ready)
}

// TestNFSCrashDuringTeardownDeletesNothing: the agent is SIGKILLed at
// moments spread across an NFS volume's teardown, and started again; the
// teardown completes each time, nothing stays mounted, and every file on
// the server is intact.
func TestNFSCrashDuringTeardownDeletesNothing(t *testing.T) {
	e := startNFS(t)
	a := e.a
	for i := range 100 {
		if err := os.WriteFile(filepath.Join(e.export, fmt.Sprintf("f%03d", i)), []byte(fmt.Sprint(i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sums := checksums(t, e.export)
	a.start()
	for round := range 6 {
		name := fmt.Sprintf("db-%d", round)
		a.writeManifest("pods.yaml", fmt.Sprintf(nfsPod, name, false))
		p := a.waitPod("default", name, 20*time.Second, ready)
		dir := p.volume("share").Path
		if err := os.WriteFile(e.in(filepath.Join(dir, name)), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		a.removeManifest("pods.yaml")
		time.Sleep(time.Duration(round*10) * time.Millisecond) // from before the teardown to after it
		a.kill()
		a.start()
		a.waitPodDirGone(p.UID)
		if e.mounted(t, dir) {
			t.Fatalf("round %d: %s still mounted", round, dir)
		}
		checkData(t, "export", e.export, sums)
		checkFile(t, filepath.Join(e.export, name), name)
	}
}
