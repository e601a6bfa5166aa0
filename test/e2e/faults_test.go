package e2e

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// faultSeedEnv replays a fault-injection run: set it to the seed a failed
// run printed.
const faultSeedEnv = "VOLUME_AGENT_FAULT_SEED"

// envUint is the unsigned number in $name, or def when it is unset: the
// seed that replays a random run, the length of a longer one.
func envUint(t *testing.T, name string, def uint64) uint64 {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return n
}

// minKills is how many times the agent is SIGKILLed in one run.
const minKills = 55

// settleDelay is how long a manifest file must be unchanged before the
// agent believes content of it that drops something (ARCHITECTURE
// invariant 7). A half-written file that stays so longer is, to the agent,
// an edit like any other, and the contract says it is believed: a Secret
// cut after its metadata is a Secret without keys, and its volume loses its
// files. The run completes every half-written file within partialLife, well
// inside settleDelay, so the losses it reports are the agent's.
const (
	settleDelay = 750 * time.Millisecond
	partialLife = settleDelay / 2
)

// faultPod is a pod of the fault-injection run, with every volume type.
const faultPod = `
apiVersion: v1
kind: Pod
metadata: {name: %[1]s, uid: %[1]s, labels: {app: faults}}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: data, emptyDir: {}}
  - {name: mem, emptyDir: {medium: Memory, sizeLimit: 4Mi}}
  - {name: cfg, configMap: {name: %[2]s, optional: %[5]v}}
  - {name: sec, secret: {secretName: %[3]s}}
  - name: all
    projected:
      sources:
      - configMap: {name: %[2]s, items: [{key: value, path: cm/value}]}
      - secret: {name: %[3]s, items: [{key: value, path: secret/value}]}
      - downwardAPI: {items: [{path: name, fieldRef: {fieldPath: metadata.name}}]}
  - name: info
    downwardAPI: {items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]}
  - {name: host, hostPath: {path: %[4]s, type: Directory}}
  - {name: store, persistentVolumeClaim: {claimName: shared}}
`

// faultStorage is a local PV every pod shares through one claim.
const faultStorage = `
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-shared}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteMany]
  local: {path: %s}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [node-1]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: shared}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  resources: {requests: {storage: 1Gi}}
`

// Where each volume of a faultPod lives (its directory, when not named
// after the volume), and whether something is mounted there.
var faultVolumes = []struct {
	name, plugin, dir string
	mounted           bool
}{
	{"data", "kubernetes.io~empty-dir", "", false},
	{"mem", "kubernetes.io~empty-dir", "", true},
	{"cfg", "kubernetes.io~configmap", "", false},
	{"sec", "kubernetes.io~secret", "", true},
	{"all", "kubernetes.io~projected", "", true},
	{"info", "kubernetes.io~downward-api", "", false},
	{"store", "kubernetes.io~local-volume", "pv-shared", true},
}

// faultRun is the state of the world the test has written.
type faultRun struct {
	t     *testing.T
	a     *agent
	rng   *rand.Rand
	host  string
	disk  string               // the local PV's directory
	next  int                  // number of the next pod
	refs  map[string][2]string // pod name -> the configMap and secret it uses
	pods  map[string]string    // pod name -> its manifest
	gone  []string             // pods deleted
	cms   map[string]int       // configMap name -> version written
	secs  map[string]int       // secret name -> version written
	marks map[string]bool      // pods whose emptyDirs got a marker file
	// partial holds the files left half-written, each completed after the
	// next restart or partialLife after it was written, whichever is first.
	partial *partialFiles
	stats   map[string]int // what the run did, for the log
}

// TestFaultInjection: while pods are created, edited and deleted, the agent
// is SIGKILLed at random moments at least 50 times (and sometimes stopped
// with SIGTERM), restarted each time. At the end every desired volume is
// mounted once with the latest content, nothing is left of deleted pods, no
// ..data link dangles, and the data in hostPath and emptyDir volumes is
// intact.
func TestFaultInjection(t *testing.T) {
	seed := envUint(t, faultSeedEnv, uint64(time.Now().UnixNano()))
	t.Logf("fault injection seed %d (replay with %s=%d)", seed, faultSeedEnv, seed)
	a := newAgent(t)
	r := &faultRun{t: t, a: a, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)),
		host: filepath.Join(t.TempDir(), "host"), pods: map[string]string{}, refs: map[string][2]string{},
		cms: map[string]int{}, secs: map[string]int{}, marks: map[string]bool{},
		partial: newPartialFiles(t, a.manifests), stats: map[string]int{}}
	hostSums := r.makeHostData()
	r.disk = filepath.Join(t.TempDir(), "disk")
	diskSums := makeData(t, r.rng, r.disk)
	r.a.writeManifest("storage.yaml", fmt.Sprintf(faultStorage, r.disk))
	for i := range 3 {
		r.writeConfigMap("cm-" + strconv.Itoa(i))
		r.writeSecret("sec-" + strconv.Itoa(i))
	}
	for range 4 {
		r.createPod()
	}
	r.a.start()
	start := time.Now()
	kills := 0
	for kills < minKills {
		r.completePartial()
		for range 1 + r.rng.IntN(4) {
			r.change()
		}
		wait := time.Duration(r.rng.IntN(150)) * time.Millisecond
		if r.rng.IntN(6) == 0 {
			// Now and then a quiet second: files written just before a
			// start wait 0.75 s to settle, and claims bind only once they
			// have.
			wait += 1200 * time.Millisecond
		}
		time.Sleep(wait)
		r.markReadyPods()
		crash := r.rng.IntN(8) != 0
		if crash {
			kills++
		} else {
			r.stats["SIGTERMs"]++
		}
		// A change made while the agent is down is seen at its next start.
		if crash {
			r.a.kill()
		} else if err := r.a.stop(); err != nil {
			t.Fatalf("agent exit after SIGTERM: %v", err)
		}
		if r.rng.IntN(3) == 0 {
			r.change()
		}
		r.a.start()
		time.Sleep(time.Duration(r.rng.IntN(100)) * time.Millisecond)
		r.checkNothingLost()
	}
	figure(t, fmt.Sprintf("fault injection: %d SIGKILLs", kills), time.Since(start))
	t.Logf("fault injection did: %v", r.stats)
	r.completePartial()
	r.settle()
	r.check(hostSums, diskSums)
}

// change makes one random change to the manifests.
func (r *faultRun) change() {
	switch n := r.rng.IntN(10); {
	case n < 3 && len(r.pods) < 10:
		r.createPod()
	case n < 5 && len(r.pods) > 2:
		r.deletePod()
	case n < 6:
		r.resavePod()
	case n < 8:
		r.writeConfigMap("cm-" + strconv.Itoa(r.rng.IntN(3)))
	default:
		r.writeSecret("sec-" + strconv.Itoa(r.rng.IntN(3)))
	}
}

func (r *faultRun) createPod() {
	name := fmt.Sprintf("pod-%03d", r.next)
	r.next++
	r.refs[name] = [2]string{fmt.Sprintf("cm-%d", r.rng.IntN(3)), fmt.Sprintf("sec-%d", r.rng.IntN(3))}
	r.pods[name] = fmt.Sprintf(faultPod, name, r.refs[name][0], r.refs[name][1], r.host, r.rng.IntN(2) == 0)
	r.writeObject(name+".yaml", r.pods[name])
	r.stats["pods created"]++
}

// resavePod writes a pod's manifest again, unchanged — as a re-apply does.
// Half-written, it can parse as the pod with fewer volumes.
func (r *faultRun) resavePod() {
	names := sortedKeys(r.pods)
	name := names[r.rng.IntN(len(names))]
	r.writeObject(name+".yaml", r.pods[name])
	r.stats["pods saved again"]++
}

func (r *faultRun) deletePod() {
	names := sortedKeys(r.pods)
	name := names[r.rng.IntN(len(names))]
	delete(r.pods, name)
	r.gone = append(r.gone, name)
	r.partial.forget(name + ".yaml")
	r.a.removeManifest(name + ".yaml")
	r.stats["pods deleted"]++
}

// writeConfigMap writes the next version of a ConfigMap.
func (r *faultRun) writeConfigMap(name string) {
	r.cms[name]++
	r.writeObject(name+".yaml", fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s}\ndata: {value: v%d}\n", name, r.cms[name]))
	r.stats["configMap edits"]++
}

func (r *faultRun) writeSecret(name string) {
	r.secs[name]++
	r.writeObject(name+".yaml", fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: %s}\nstringData: {value: s%d}\n", name, r.secs[name]))
	r.stats["secret edits"]++
}

// writeObject writes a manifest atomically, or in place (a reader may see
// it half-written), or only half of it in place, as a writer that the
// agent's crash — or a crash of the node — interrupted would leave it; the
// rest follows after the next restart, or once the half has been there for
// partialLife (see partialFiles).
func (r *faultRun) writeObject(file, content string) {
	r.partial.forget(file)
	switch r.rng.IntN(6) {
	case 0:
		r.writeInPlace(file, content)
	case 1:
		cut := r.rng.IntN(len(content))
		if r.rng.IntN(2) == 0 { // at a line's end: often still valid YAML
			cut = strings.LastIndexByte(content[:cut], '\n') + 1
		}
		r.partial.write(file, content[:cut], content)
		r.stats["half-written files"]++
	default:
		r.a.writeManifest(file, content)
	}
}

func (r *faultRun) writeInPlace(file, content string) {
	if err := writeInPlace(r.a.manifests, file, content); err != nil {
		r.t.Fatal(err)
	}
}

func writeInPlace(dir, file, content string) error {
	return os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644)
}

// completePartial finishes every half-written file.
func (r *faultRun) completePartial() { r.partial.completeAll() }

// partialFiles are the manifests left half-written. Invariant 7 protects a
// file read half-written only until it has been unchanged for settleDelay:
// the agent cannot tell one that stays so longer from an edit, and believes
// it, keys and volumes dropped included. So each is completed partialLife
// after its half was written, by a timer that fires whatever the run is
// doing (an agent start may take a while), unless the run completes it
// first or writes the file again. Files half-written just before a crash,
// or while the agent is down, still meet the next start half-written: the
// agent must then wait for them to settle (invariant 7, at start).
type partialFiles struct {
	t   *testing.T
	dir string

	mu    sync.Mutex
	files map[string]*partialFile // guarded by mu
}

// partialFile is a half-written file: its full content, completed by timer.
type partialFile struct {
	content string
	timer   *time.Timer
}

func newPartialFiles(t *testing.T, dir string) *partialFiles {
	p := &partialFiles{t: t, dir: dir, files: map[string]*partialFile{}}
	// Cleanups run last registered first: this one before the agent's, so
	// no timer writes once the test is over.
	t.Cleanup(func() { p.stop() })
	return p
}

// write writes half of a file in place and arranges its completion.
func (p *partialFiles) write(file, half, content string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forgetLocked(file)
	if err := writeInPlace(p.dir, file, half); err != nil {
		p.t.Fatal(err)
	}
	f := &partialFile{content: content}
	f.timer = time.AfterFunc(partialLife, func() { p.complete(file, f) })
	p.files[file] = f
}

// complete writes f whole, unless it has been completed, written again or
// deleted since. It runs on its timer's goroutine: it reports, never stops.
func (p *partialFiles) complete(file string, f *partialFile) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.files[file] != f {
		return
	}
	delete(p.files, file)
	if err := writeInPlace(p.dir, file, f.content); err != nil {
		p.t.Errorf("complete half-written %s: %v", file, err)
	}
}

// completeAll writes every half-written file whole.
func (p *partialFiles) completeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for file, f := range p.files {
		p.forgetLocked(file)
		if err := writeInPlace(p.dir, file, f.content); err != nil {
			p.t.Fatal(err)
		}
	}
}

// forget drops the completion of file, about to be written again or deleted.
func (p *partialFiles) forget(file string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forgetLocked(file)
}

func (p *partialFiles) forgetLocked(file string) {
	if f, ok := p.files[file]; ok {
		f.timer.Stop()
		delete(p.files, file)
	}
}

// stop drops every completion still to come.
func (p *partialFiles) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for file := range p.files {
		p.forgetLocked(file)
	}
}

// markReadyPods writes a marker into both emptyDirs of every desired pod
// the agent reports ready, once: that data must survive everything.
func (r *faultRun) markReadyPods() {
	code, body := r.a.get("/v1/pods")
	if code != 200 {
		return // the agent may be starting
	}
	for name := range r.pods {
		if r.marks[name] || !strings.Contains(body, `"uid": "`+name+`"`) {
			continue
		}
		p, ok := r.a.pod("default", name)
		if !ok || !p.Ready || len(p.Volumes) != len(faultVolumes)+1 {
			continue // not ready, or its manifest is read half-written
		}
		for v, file := range map[string]string{"data": "marker", "mem": "marker", "store": "marker-" + name} {
			if err := os.WriteFile(filepath.Join(p.volume(v).Path, file), []byte(name), 0o644); err != nil {
				r.t.Fatalf("write marker into %s/%s: %v", name, v, err)
			}
		}
		r.marks[name] = true
		r.stats["pods marked"]++
	}
}

// checkNothingLost holds at every moment: a desired pod that was ready keeps
// its emptyDir data and never sees its configMap or secret volume emptied,
// whatever state its manifests are in.
func (r *faultRun) checkNothingLost() {
	for name := range r.marks {
		if _, desired := r.pods[name]; !desired {
			continue
		}
		vols := filepath.Join(r.a.root, "pods", name, "volumes")
		for _, path := range []string{"kubernetes.io~empty-dir/data/marker", "kubernetes.io~empty-dir/mem/marker",
			"kubernetes.io~configmap/cfg/value", "kubernetes.io~secret/sec/value", "kubernetes.io~projected/all/cm/value",
			"kubernetes.io~local-volume/pv-shared/marker-" + name} {
			if _, err := os.Stat(filepath.Join(vols, path)); err != nil {
				r.t.Fatalf("pod %s lost %s: %v", name, path, err)
			}
		}
	}
}

// makeHostData fills the hostPath directory and returns its checksums.
func (r *faultRun) makeHostData() map[string][32]byte { return makeData(r.t, r.rng, r.host) }

// makeData fills dir with random files and returns their checksums.
func makeData(t *testing.T, rng *rand.Rand, dir string) map[string][32]byte {
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		data := make([]byte, 1+rng.IntN(64<<10))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		name := filepath.Join(dir, fmt.Sprintf("f%02d", i))
		if i%2 == 1 {
			name = filepath.Join(dir, "sub", fmt.Sprintf("f%02d", i))
		}
		if err := os.WriteFile(name, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return checksums(t, dir)
}

func checksums(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		out[path] = sha256.Sum256(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// settle waits until the agent is ready and serves exactly the desired
// pods, each ready with the latest content.
func (r *faultRun) settle() {
	waitFor(r.t, 20*time.Second, "/readyz", func() (bool, string) {
		code, body := r.a.get("/readyz")
		return code == 200, body
	})
	waitFor(r.t, 20*time.Second, "exactly the desired pods, ready with the latest content", func() (bool, string) {
		pods := r.a.pods()
		if len(pods) != len(r.pods) {
			return false, fmt.Sprintf("%d pods served, %d desired", len(pods), len(r.pods))
		}
		for _, p := range pods {
			if _, ok := r.pods[p.Name]; !ok || !p.Ready || len(p.Volumes) != len(faultVolumes)+1 {
				return false, fmt.Sprintf("pod %s: desired %v, ready %v, %d volumes", p.Name, ok, p.Ready, len(p.Volumes))
			}
			if msg := r.contentProblem(p); msg != "" {
				return false, msg
			}
		}
		return true, ""
	})
	time.Sleep(time.Second) // past the manifests' settle delay: a late wrong teardown would show
}

// contentProblem says how a pod's content differs from the latest written.
func (r *faultRun) contentProblem(p apiPod) string {
	refs := r.refs[p.Name]
	cm, sec := fmt.Sprintf("v%d", r.cms[refs[0]]), fmt.Sprintf("s%d", r.secs[refs[1]])
	for path, want := range map[string]string{
		filepath.Join(p.volume("cfg").Path, "value"):           cm,
		filepath.Join(p.volume("sec").Path, "value"):           sec,
		filepath.Join(p.volume("all").Path, "cm", "value"):     cm,
		filepath.Join(p.volume("all").Path, "secret", "value"): sec,
		filepath.Join(p.volume("all").Path, "name"):            p.Name,
	} {
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			return fmt.Sprintf("%s = %q (%v), want %q", path, got, err, want)
		}
	}
	return ""
}

// check verifies the end state on disk and in the mount table.
func (r *faultRun) check(hostSums, diskSums map[string][32]byte) {
	t := r.t
	root, err := filepath.EvalSymlinks(r.a.root)
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]int{}
	for _, m := range readMountinfo(t) {
		if strings.HasPrefix(m.point, root+"/") {
			targets[m.point]++
		}
	}
	want := map[string]bool{}
	for name := range r.pods {
		for _, v := range faultVolumes {
			dir := filepath.Join(root, "pods", name, "volumes", v.plugin, cmp.Or(v.dir, v.name))
			if v.mounted {
				want[dir] = true
				if targets[dir] != 1 {
					t.Errorf("%s is mounted %d times, want once", dir, targets[dir])
				}
			}
			if _, err := os.Stat(dir); err != nil {
				t.Errorf("volume %s: %v", dir, err)
			}
			switch v.name {
			case "data", "mem":
				if r.marks[name] {
					checkFile(t, filepath.Join(dir, "marker"), name)
				}
				continue
			case "store":
				continue
			}
			checkDataLink(t, dir)
		}
	}
	for target, n := range targets {
		if !want[target] {
			t.Errorf("%s is mounted (%d times) but belongs to no desired volume", target, n)
		}
	}
	for _, name := range r.gone {
		if _, err := os.Lstat(filepath.Join(root, "pods", name)); !os.IsNotExist(err) {
			t.Errorf("deleted pod %s still has its directory (%v)", name, err)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(root, "pods"))
	if len(entries) != len(r.pods) {
		t.Errorf("%d pod directories, want %d", len(entries), len(r.pods))
	}
	checkData(t, "hostPath", r.host, hostSums)
	checkData(t, "local PV", r.disk, diskSums)
	// What every pod wrote through the PV — deleted pods' included — is on
	// the disk.
	for name := range r.marks {
		checkFile(t, filepath.Join(r.disk, "marker-"+name), name)
	}
}

// checkData fails when a file of dir that had sums changed or went.
func checkData(t *testing.T, what, dir string, sums map[string][32]byte) {
	t.Helper()
	after := checksums(t, dir)
	for path, sum := range sums {
		if after[path] != sum {
			t.Errorf("%s file %s changed or went", what, path)
		}
	}
}

// checkDataLink fails when a content volume's ..data link dangles, or a
// payload directory other than the current one is left behind.
func checkDataLink(t *testing.T, dir string) {
	t.Helper()
	target, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil {
		t.Errorf("%s: %v", dir, err)
		return
	}
	if _, err := os.Stat(filepath.Join(dir, target)); err != nil {
		t.Errorf("%s: ..data points at a missing directory: %v", dir, err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if n := e.Name(); strings.HasPrefix(n, "..2") && n != target {
			t.Errorf("%s: stale payload directory %s", dir, n)
		}
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
