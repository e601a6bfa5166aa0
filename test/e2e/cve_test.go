package e2e

// Regression tests for the kubelet's volume CVEs, one each, named after
// them: SECURITY.md explains what each CVE was, which of the agent's
// operations could repeat it, and why these tests cover that.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
)

// outsideTree makes a directory outside every volume holding files a pod
// must never reach, and returns it with a snapshot to compare against.
func outsideTree(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"passwd", "sub/shadow", "sub/deeper/key"} {
		plugintest.WriteFile(t, filepath.Join(dir, name), "host data: "+name)
	}
	return dir, fmt.Sprint(ownersUnder(t, dir), contentsUnder(t, dir))
}

// contentsUnder maps every regular file below dir to its content.
func contentsUnder(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		m[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkOutside fails when the tree made by outsideTree changed.
func checkOutside(t *testing.T, dir, before string) {
	t.Helper()
	if after := fmt.Sprint(ownersUnder(t, dir), contentsUnder(t, dir)); after != before {
		t.Errorf("outside the volumes, %s changed:\n%s\nwas\n%s", dir, after, before)
	}
}

// TestCVE2017_1002101_SymlinksInAVolumeNeverLeadOut: CVE-2017-1002101 was
// the kubelet following a symlink a container had made in its volume when
// it mounted a subPath, so the container got any host path. The agent's
// own subPath mounts are covered by TestSubPathRefusals (and, in package
// subpath, TestCVE2017_1002101_SubPathSymlinkNeverMountsOutside); the other
// things it does inside volumes a pod writes are give them the pod's
// fsGroup and remove them at teardown. Symlinks a pod planted there, to a host directory and a host
// file, at the top and deep down, must lead neither operation out: the host
// files keep their content and their group, before and after the pod goes.
func TestCVE2017_1002101_SymlinksInAVolumeNeverLeadOut(t *testing.T) {
	a := newAgent(t)
	outside, before := outsideTree(t)
	vol := disk(t, "d")
	a.writeManifest("pv.yaml", fmt.Sprintf(localPV, "pv-1", "1Gi", vol))
	a.writeManifest("claim.yaml", dataClaim)
	const pod = `
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  securityContext: {fsGroup: %d}
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: store, persistentVolumeClaim: {claimName: data}}
  - {name: scratch, emptyDir: {}}
`
	a.writeManifest("first.yaml", fmt.Sprintf(pod, "first", 2000))
	a.start()
	p := a.waitPod("default", "first", 10*time.Second, ready)

	// What a container of the pod could do in both of its volumes.
	for _, dir := range []string{p.volume("store").Path, p.volume("scratch").Path} {
		for _, err := range []error{
			os.Symlink(outside, filepath.Join(dir, "escape")),
			os.Symlink(filepath.Join(outside, "passwd"), filepath.Join(dir, "passwd")),
			os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755),
			os.Symlink(filepath.Join(outside, "sub"), filepath.Join(dir, "a", "b", "c")),
			os.Symlink("../../../../../../../../../..", filepath.Join(dir, "a", "up")),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}

	// A second pod of the claim with another fsGroup: the agent walks the
	// volume again, with the planted links in it.
	a.writeManifest("second.yaml", fmt.Sprintf(pod, "second", 3000))
	a.waitPod("default", "second", 10*time.Second, ready)
	checkOutside(t, outside, before)

	// Both pods go: the emptyDirs are removed, the claim's data stays.
	second, _ := a.pod("default", "second")
	a.removeManifest("first.yaml")
	a.removeManifest("second.yaml")
	a.waitPodDirGone(p.UID)
	a.waitPodDirGone(second.UID)
	checkOutside(t, outside, before)
	if _, err := os.Lstat(filepath.Join(vol, "escape")); err != nil {
		t.Errorf("the claim's own data was touched by teardown: %v", err)
	}
}

// TestCVE2017_1002102_PlantedLinksInContentVolumes: CVE-2017-1002102 was
// the kubelet's atomic writer following symlinks a container had planted
// in a writable secret, configMap, downwardAPI or projected volume, so its
// clean-up deleted host files. Here the planted links replace a key's
// file, ..data, and the names the writer uses for its own temporary and
// timestamped entries; then the configMap changes, dropping one key. No
// host file may change, and the volume must again show the new content
// through a ..data that points inside it.
func TestCVE2017_1002102_PlantedLinksInContentVolumes(t *testing.T) {
	a := newAgent(t)
	outside, before := outsideTree(t)
	const cm = `
apiVersion: v1
kind: ConfigMap
metadata: {name: conf}
data: {%s}
---
apiVersion: v1
kind: Pod
metadata: {name: app}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: config, configMap: {name: conf}}
  - name: all
    projected:
      sources:
      - configMap: {name: conf}
      - downwardAPI: {items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]}
`
	a.writeManifest("app.yaml", fmt.Sprintf(cm, "passwd: one, keep: one"))
	a.start()
	p := a.waitPod("default", "app", 10*time.Second, ready)

	for _, vol := range []string{"config", "all"} {
		dir := p.volume(vol).Path
		for _, name := range []string{"passwd", "..data"} {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
		for _, err := range []error{
			os.Symlink(filepath.Join(outside, "passwd"), filepath.Join(dir, "passwd")),
			os.Symlink(filepath.Join(outside, "sub"), filepath.Join(dir, "..data")),
			os.Symlink(outside, filepath.Join(dir, "..data_tmp")),
			os.Symlink(outside, filepath.Join(dir, "..2017_01_01_00_00_00.000000001")),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	a.writeManifest("app.yaml", fmt.Sprintf(cm, "keep: two"))
	for _, vol := range []string{"config", "all"} {
		dir := p.volume(vol).Path
		waitFor(t, 10*time.Second, vol+" rewritten", func() (bool, string) {
			b, err := os.ReadFile(filepath.Join(dir, "keep"))
			return err == nil && string(b) == "two", fmt.Sprint(string(b), err)
		})
		target, err := os.Readlink(filepath.Join(dir, "..data"))
		if err != nil || strings.Contains(target, "/") || !strings.HasPrefix(target, "..") {
			t.Errorf("%s: ..data -> %q (%v); want a timestamped directory of the volume", vol, target, err)
		}
		// A link the pod made in place of a key's file stays the pod's: the
		// writer removes only what it made, and never through a link.
	}
	checkOutside(t, outside, before)
}

// TestCVE2021_25741_SwapRaceNeverLeadsOut: CVE-2021-25741 was a race: a
// container swapped a checked directory of its volume for a symlink to
// the host between the kubelet's check and its use. The agent's
// operations inside volumes a pod writes are the fsGroup walk and the
// teardown removal; here a racer swaps a directory of the volume for a
// symlink to a host directory and back, without pause, while the agent
// gives a new pod its fsGroup and while it removes the emptyDirs, round
// after round. The host directory must never change.
func TestCVE2021_25741_SwapRaceNeverLeadsOut(t *testing.T) {
	a := newAgent(t)
	outside, before := outsideTree(t)
	vol := disk(t, "d")
	a.writeManifest("pv.yaml", fmt.Sprintf(localPV, "pv-1", "1Gi", vol))
	a.writeManifest("claim.yaml", dataClaim)
	a.start()
	const pod = `
apiVersion: v1
kind: Pod
metadata: {name: racer-%d}
spec:
  securityContext: {fsGroup: %d}
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: store, persistentVolumeClaim: {claimName: data}}
  - {name: scratch, emptyDir: {}}
`
	// The claim's volume: the racer runs in it through every round.
	stopStore := swapRacer(t, vol, outside)
	defer stopStore()
	const rounds = 6
	for i := range rounds {
		name := fmt.Sprintf("racer-%d.yaml", i)
		a.writeManifest(name, fmt.Sprintf(pod, i, 2000+i))
		p := a.waitPod("default", fmt.Sprintf("racer-%d", i), 15*time.Second, ready)
		stop := swapRacer(t, p.volume("scratch").Path, outside)
		time.Sleep(50 * time.Millisecond) // let it swap a few times first
		a.removeManifest(name)
		a.waitPodDirGone(p.UID)
		if n := stop(); n == 0 {
			t.Fatalf("round %d: the racer never swapped", i)
		}
		checkOutside(t, outside, before)
	}
	if n := stopStore(); n == 0 {
		t.Fatal("the racer in the claim's volume never swapped")
	}
	checkOutside(t, outside, before)
}

// swapRacer fills dir/victim with files and then, until stopped, swaps it
// for a symlink to target and back. stop returns the number of swaps; it
// may be called more than once.
func swapRacer(t *testing.T, dir, target string) (stop func() int) {
	t.Helper()
	victim, aside, link := filepath.Join(dir, "victim"), filepath.Join(dir, "victim.aside"), filepath.Join(dir, "victim.link")
	for i := range 20 {
		plugintest.WriteFile(t, filepath.Join(victim, fmt.Sprintf("d%d", i%4), fmt.Sprintf("f%d", i)), "pod data")
	}
	var (
		swaps atomic.Int64
		done  = make(chan struct{})
		wg    sync.WaitGroup
		once  sync.Once
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			// Errors are expected: the agent removes the tree under the
			// racer's feet. Once the directory is gone, the race is over.
			if _, err := os.Lstat(dir); err != nil {
				return
			}
			_ = os.Symlink(target, link)
			if os.Rename(victim, aside) == nil {
				if os.Rename(link, victim) == nil {
					swaps.Add(1)
				}
				_ = os.Remove(victim) // the link, when the rename above made it
				_ = os.Rename(aside, victim)
			}
		}
	}()
	return func() int {
		once.Do(func() { close(done); wg.Wait() })
		return int(swaps.Load())
	}
}

// TestCVE2023_3676_PodStringsNeverReachAShell: CVE-2023-3676 was the
// kubelet on Windows passing a pod's subPath to PowerShell, so a crafted
// path ran commands as the node. The agent passes strings from a pod to
// other programs in two places: the hostPath check (its own binary in a
// child process) and mount(8) for NFS. Paths and servers full of shell
// syntax must be taken literally (a hostPath directory with that very
// name) or refused with the field named, and never run anything; a server
// or option that would read as a flag of mount(8) is refused.
func TestCVE2023_3676_PodStringsNeverReachAShell(t *testing.T) {
	a := newAgent(t)
	base := t.TempDir()
	marker := filepath.Join(base, "pwned")
	shell := "$(touch " + marker + ");touch${IFS}" + marker + "`touch " + marker + "`|touch " + marker
	host := filepath.Join(base, "x"+strings.ReplaceAll(shell, " ", "_"))
	a.writeManifest("pod.yaml", fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: crafted}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: made, hostPath: {path: %[1]q, type: DirectoryOrCreate}}
  - {name: checked, hostPath: {path: %[1]q, type: Directory}}
  - {name: server, nfs: {server: %[2]q, path: /export}}
  - {name: path, nfs: {server: 127.0.0.1, path: %[3]q}}
  - {name: flag, nfs: {server: "-oremount", path: /export}}
`, host, "x"+strings.ReplaceAll(shell, " ", "_"), "/e"+strings.ReplaceAll(shell, " ", "_")))
	a.start()
	p := a.waitPod("default", "crafted", 30*time.Second, func(p apiPod) bool {
		return p.volume("made").State == "Mounted" && p.volume("checked").State == "Mounted" &&
			p.volume("flag").State == "Failed" && p.volume("server").State == "Failed" && p.volume("path").State == "Failed"
	})
	if info, err := os.Stat(host); err != nil || !info.IsDir() {
		t.Errorf("the hostPath directory was not made under its literal name: %v", err)
	}
	if e := p.volume("flag").Error; !strings.Contains(e, "server") || !strings.Contains(e, "-oremount") {
		t.Errorf("flag error %q does not name the field and the value", e)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a string from the pod ran a command")
	}
	entries, _ := os.ReadDir(base)
	if len(entries) != 1 {
		t.Errorf("%s holds %d entries, want only the hostPath directory", base, len(entries))
	}
}
