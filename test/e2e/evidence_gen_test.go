package e2e

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The generative test of the evidence rules (issue 27): random sequences of
// operator actions against the built binary in manifest mode, checked after
// every step.

// evidenceSeedEnv replays a run: set it to the seed a failed run printed.
// evidenceStepsEnv sets the number of steps (300 by default), for longer
// runs: VOLUME_AGENT_EVIDENCE_STEPS=3000 go test -run TestEvidenceRules ./test/e2e.
const (
	evidenceSeedEnv  = "VOLUME_AGENT_EVIDENCE_SEED"
	evidenceStepsEnv = "VOLUME_AGENT_EVIDENCE_STEPS"
)

// genReclaimDelay is the run's --reclaim-delay; genSlack is how long past
// the settle time plus the reclaim delay the storage of an owner observed
// gone may take to go (a pass, a loaded machine).
const (
	genReclaimDelay = time.Second
	genSlack        = 5 * time.Second
)

// genPod is a pod of the run: an emptyDir "data", the canary directory
// %[4]s as a hostPath and, with eph, the generic ephemeral volume "eph" of
// class eph; %[3]s is a label that edits change.
const genPod = `
apiVersion: v1
kind: Pod
metadata: {name: %[1]s, labels: {edit: "%[3]s"}}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: data, emptyDir: {}}
  - {name: host, hostPath: {path: %[4]s, type: Directory}}
%[2]s`

const genEphemeral = `  - name: eph
    ephemeral:
      volumeClaimTemplate:
        spec:
          storageClassName: eph
          accessModes: [ReadWriteOnce]
          resources: {requests: {storage: 1Gi}}
`

// genClaimFile is claim %[1]s of class eph and pod use-%[1]s using it as
// volume "store", read-only when %[2]v.
const genClaimFile = `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %[1]s}
spec:
  storageClassName: eph
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: use-%[1]s}
spec:
  containers: [{name: c, image: busybox}]
  volumes: [{name: store, persistentVolumeClaim: {claimName: %[1]s, readOnly: %[2]v}}]
`

// genOwner is one incarnation of a pod: its emptyDir, and its ephemeral
// volume, belong to it alone.
type genOwner struct {
	token string // what it wrote in its volumes
	name  string // the pod's name
	file  string // the manifest file that holds it
	eph   bool
	edit  int
	// data and ephPath are its volumes on the host; ephPV is the PV of
	// its ephemeral volume.
	data, ephPath, ephPV string
}

// genClaim is one claim of the manifests, its pod use-<name> and its
// volume. A manifest claim without metadata.uid is its name: the same
// name back within the reclaim delay is the same claim, with its data.
type genClaim struct {
	token string
	name  string
	pv    string
	path  string // the volume, as its pod sees it
	live  bool
	// gone is when its file was removed (zero while live).
	gone time.Time
}

// genGone is the storage of an owner observed gone, and when it was.
type genGone struct {
	what  string
	paths []string
	at    time.Time
}

type genRun struct {
	t      *testing.T
	a      *agent
	rng    *rand.Rand
	data   string // --local-path-root
	canary string // a directory outside the agent's, which nothing may change
	sum    string // the canary's checksum
	next   int    // number of the next token and file
	pods   map[string]*genOwner
	claims map[string]*genClaim
	gone   []genGone
	stats  map[string]int
	// logs are the logs of the agents stopped so far, for a failure.
	logs strings.Builder
	// since is when the running agent started with the manifests in
	// place: a removal counts, and a reclaim delay runs, only while an
	// agent runs (an agent restarted every half second releases nothing).
	since time.Time
}

// TestEvidenceRules drives random sequences of operator actions — pods
// created, edited, rewritten (`rm; cp`), moved between files, deleted and
// created again under the same name, with emptyDirs and ephemeral volumes;
// claims and their pods created and deleted; the manifest directory emptied
// across a restart; SIGTERM and SIGKILL; a second agent on the same root;
// a claim volume's readOnly flipped — and checks after every step that
// every owner that still exists has its data intact, that no owner ever
// sees another's data, that the storage of an owner observed gone for
// longer than the settle time plus the reclaim delay is gone, and that
// nothing outside the agent's directories changed.
func TestEvidenceRules(t *testing.T) {
	seed := envUint(t, evidenceSeedEnv, rand.Uint64())
	steps := int(envUint(t, evidenceStepsEnv, 300))
	t.Logf("seed %d (replay with %s=%d), %d steps", seed, evidenceSeedEnv, seed, steps)
	r := &genRun{t: t, a: newAgent(t), rng: rand.New(rand.NewPCG(seed, 27)), data: filepath.Join(t.TempDir(), "local"),
		canary: t.TempDir(), pods: map[string]*genOwner{}, claims: map[string]*genClaim{}, stats: map[string]int{}}
	r.a.env = []string{"VOLUME_AGENT_TEST_LOCK_WAIT=100ms"}
	for i := range 3 {
		if err := os.WriteFile(filepath.Join(r.canary, fmt.Sprint("file", i)), []byte(fmt.Sprint("canary ", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r.sum = r.canarySum()
	r.a.writeManifest("class.yaml", ephemeralClassManifest)
	r.a.start("--provisioners", "local", "--local-path-root", r.data, "--reclaim-delay", genReclaimDelay.String())
	start := time.Now()
	r.since = start
	for step := range steps {
		what := r.step()
		r.stats[what]++
		if !t.Failed() {
			r.verify(fmt.Sprintf("seed %d, step %d (%s)", seed, step, what))
		}
		if t.Failed() {
			r.saveLogs(seed)
			t.Fatalf("seed %d: failed at step %d (%s)", seed, step, what)
		}
	}
	t.Logf("%d steps in %v: %v", steps, time.Since(start).Round(time.Millisecond), r.stats)
}

// step takes one random action and says which.
func (r *genRun) step() string {
	actions := []struct {
		weight int
		name   string
		do     func() bool // false: not possible now
	}{
		{20, "create pod", r.createPod},
		{12, "delete pod", r.deletePod},
		{8, "edit pod", r.editPod},
		{6, "rm; cp a pod's file", r.rewritePod},
		{6, "mv a pod's file, or a pod between files", r.movePod},
		{6, "create claim", r.createClaim},
		{5, "delete claim", r.deleteClaim},
		{4, "flip readOnly", r.flipReadOnly},
		{4, "SIGTERM restart", func() bool { return r.restart(false) }},
		{4, "SIGKILL restart", func() bool { return r.restart(true) }},
		{2, "empty the directory and restart", r.emptyAndRestart},
		{2, "second agent on the root", r.secondAgent},
	}
	total := 0
	for _, a := range actions {
		total += a.weight
	}
	for {
		n := r.rng.IntN(total)
		for _, a := range actions {
			if n -= a.weight; n < 0 {
				if a.do() {
					return a.name
				}
				break
			}
		}
	}
}

func (r *genRun) token() string {
	r.next++
	return fmt.Sprintf("owner-%d-%x", r.next, r.rng.Uint32())
}

// podNames are the names pods take, few, so that names are reused.
var podNames = []string{"p0", "p1", "p2", "p3"}

func (r *genRun) createPod() bool {
	var free []string
	for _, n := range podNames {
		if r.pods[n] == nil {
			free = append(free, n)
		}
	}
	if len(free) == 0 {
		return false
	}
	o := &genOwner{token: r.token(), name: free[r.rng.IntN(len(free))], eph: r.rng.IntN(2) == 0}
	o.file = fmt.Sprintf("f%d.yaml", r.next)
	r.pods[o.name] = o
	r.writeFile(o.file, false)
	p := r.a.waitPod("default", o.name, 20*time.Second, ready)
	o.data = p.volume("data").Path
	if o.eph {
		v := p.volume("eph")
		o.ephPath, o.ephPV = v.Path, v.PV
	}
	for _, dir := range o.dirs() {
		if got := entries(r.t, dir); len(got) != 0 {
			r.t.Errorf("new pod %s (%s) finds %v in %s: another owner's data", o.name, o.token, got, dir)
		}
		r.write(filepath.Join(dir, "marker"), o.token)
	}
	return true
}

// fileContent is the content of manifest file f: the documents of the
// live pods it holds, by name.
func (r *genRun) fileContent(f string) (string, bool) {
	var docs []string
	for _, n := range podNames {
		if o := r.pods[n]; o != nil && o.file == f {
			docs = append(docs, r.podManifest(o))
		}
	}
	return strings.Join(docs, "---\n"), len(docs) > 0
}

// writeFile writes manifest file f as it holds now (renamed into place, or
// written in place when inPlace); removes it when it holds nothing.
func (r *genRun) writeFile(f string, inPlace bool) {
	content, any := r.fileContent(f)
	switch {
	case !any:
		r.a.removeManifest(f)
	case inPlace:
		r.write(filepath.Join(r.a.manifests, f), content)
	default:
		r.a.writeManifest(f, content)
	}
}

func (r *genRun) podManifest(o *genOwner) string {
	eph := ""
	if o.eph {
		eph = genEphemeral
	}
	return fmt.Sprintf(genPod, o.name, eph, strconv.Itoa(o.edit), r.canary)
}

func (o *genOwner) dirs() []string {
	if o.eph {
		return []string{o.data, o.ephPath}
	}
	return []string{o.data}
}

// livePod picks a live pod, or nil.
func (r *genRun) livePod() *genOwner {
	var names []string
	for n := range r.pods {
		names = append(names, n)
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	return r.pods[names[r.rng.IntN(len(names))]]
}

// deletePod removes a pod from its file (the file itself when it held
// only that pod; else the file rewritten without it, which the agent
// believes once the file has settled) and waits until its removal is
// observed whole: the pod gone from /v1/pods (its volumes torn down), the
// claim of its ephemeral volume no longer Bound.
func (r *genRun) deletePod() bool {
	o := r.livePod()
	if o == nil {
		return false
	}
	delete(r.pods, o.name)
	r.writeFile(o.file, r.rng.IntN(2) == 0)
	waitFor(r.t, 20*time.Second, "pod "+o.name+" torn down", func() (bool, string) {
		_, ok := r.a.pod("default", o.name)
		return !ok, ""
	})
	if o.eph {
		waitFor(r.t, 20*time.Second, "the claim of pod "+o.name+"'s ephemeral volume released", func() (bool, string) {
			for _, c := range r.a.claims() {
				if c.Name == o.name+"-eph" && c.Phase == "Bound" {
					return false, fmt.Sprintf("%+v", c)
				}
			}
			return true, ""
		})
	}
	now := time.Now()
	r.gone = append(r.gone, genGone{what: "emptyDir of " + o.token, paths: []string{o.data}, at: now.Add(-settleDelay - genReclaimDelay)})
	if o.eph {
		r.gone = append(r.gone, genGone{what: "ephemeral volume of " + o.token, at: now,
			paths: []string{filepath.Join(r.data, "default-"+o.name+"-eph-"+o.ephPV), filepath.Join(r.data, ".pending-delete-"+o.ephPV)}})
	}
	return true
}

// editPod changes a pod's label, written in place or renamed into place.
func (r *genRun) editPod() bool {
	o := r.livePod()
	if o == nil {
		return false
	}
	o.edit++
	r.writeFile(o.file, r.rng.IntN(2) == 0)
	return true
}

// rewritePod removes a pod's file and writes it again at once, as config
// tools do: the same pod, whose data stays.
func (r *genRun) rewritePod() bool {
	o := r.livePod()
	if o == nil {
		return false
	}
	content, _ := r.fileContent(o.file)
	r.a.removeManifest(o.file)
	r.write(filepath.Join(r.a.manifests, o.file), content)
	time.Sleep(settleDelay / 3) // past the quiet period: a wrong teardown would have begun
	return true
}

// movePod renames a pod's file (`mv a.yaml b.yaml`, with the pods it
// holds), or moves the pod into another pod's file, the new content
// written before the old file loses it, in either order: the same pods,
// whose data stays.
func (r *genRun) movePod() bool {
	o := r.livePod()
	if o == nil {
		return false
	}
	from := o.file
	var into []string
	for _, p := range r.pods {
		if p.file != from && !slices.Contains(into, p.file) {
			into = append(into, p.file)
		}
	}
	slices.Sort(into)
	if len(into) == 0 || r.rng.IntN(2) == 0 {
		r.next++
		to := fmt.Sprintf("f%d.yaml", r.next)
		if err := os.Rename(filepath.Join(r.a.manifests, from), filepath.Join(r.a.manifests, to)); err != nil {
			r.t.Fatal(err)
		}
		for _, p := range r.pods {
			if p.file == from {
				p.file = to
			}
		}
	} else {
		o.file = into[r.rng.IntN(len(into))]
		first, second := o.file, from
		if r.rng.IntN(2) == 0 {
			first, second = second, first
		}
		r.writeFile(first, false)
		r.writeFile(second, false)
	}
	time.Sleep(settleDelay + settleDelay/3) // past the settle time: a wrong teardown would have begun
	return true
}

// claimNames are the names claims take.
var claimNames = []string{"c0", "c1"}

func (r *genRun) createClaim() bool {
	var free []string
	for _, n := range claimNames {
		if c := r.claims[n]; c == nil || !c.live {
			free = append(free, n)
		}
	}
	if len(free) == 0 {
		return false
	}
	name := free[r.rng.IntN(len(free))]
	c := r.claims[name]
	if c == nil {
		c = &genClaim{name: name}
		r.claims[name] = c
	}
	r.a.writeManifest("claim-"+name+".yaml", fmt.Sprintf(genClaimFile, name, false))
	v := r.a.waitPod("default", "use-"+name, 20*time.Second, ready).volume("store")
	got := entries(r.t, v.Path)
	switch {
	case len(got) == 0:
		// A new claim, or the old one's storage deleted: never before its
		// reclaim delay has passed.
		if c.token != "" && time.Since(c.gone) < settleDelay+genReclaimDelay {
			r.t.Errorf("claim %s back %v after its removal has lost its data", name, time.Since(c.gone))
		}
		c.token = r.token()
		r.write(filepath.Join(v.Path, "marker"), c.token)
	case c.token != "" && slices.Equal(got, []string{"marker"}):
		// The same claim back within the reclaim delay: its data.
		if r.overdue(c.gone) {
			r.t.Errorf("claim %s back %v after its removal still has its data: its storage was not deleted", name, time.Since(c.gone))
		}
		r.check(filepath.Join(v.Path, "marker"), c.token, "claim "+name+" restored")
	default:
		r.t.Errorf("claim %s finds %v in its new volume", name, got)
	}
	c.pv, c.path, c.live, c.gone = v.PV, v.Path, true, time.Time{}
	return true
}

// liveClaim picks a live claim, or nil.
func (r *genRun) liveClaim() *genClaim {
	var live []*genClaim
	for _, n := range claimNames {
		if c := r.claims[n]; c != nil && c.live {
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[r.rng.IntN(len(live))]
}

func (r *genRun) deleteClaim() bool {
	c := r.liveClaim()
	if c == nil {
		return false
	}
	r.a.removeManifest("claim-" + c.name + ".yaml")
	waitFor(r.t, 20*time.Second, "pod use-"+c.name+" torn down", func() (bool, string) {
		_, ok := r.a.pod("default", "use-"+c.name)
		return !ok, ""
	})
	c.live, c.gone = false, time.Now()
	return true
}

// flipReadOnly asks for a running claim volume read-only, then read-write
// again: a running pod's volumes cannot change, so the volume is kept as
// it is, says so, and keeps its data.
func (r *genRun) flipReadOnly() bool {
	c := r.liveClaim()
	if c == nil {
		return false
	}
	r.a.writeManifest("claim-"+c.name+".yaml", fmt.Sprintf(genClaimFile, c.name, true))
	waitFor(r.t, 10*time.Second, "the readOnly edit of claim "+c.name+"'s volume reported", func() (bool, string) {
		p, _ := r.a.pod("default", "use-"+c.name)
		return strings.Contains(p.volume("store").Error, "changed from read-write to readOnly"), fmt.Sprintf("%+v", p)
	})
	r.check(filepath.Join(c.path, "marker"), c.token, "claim "+c.name+" after a readOnly edit")
	r.a.writeManifest("claim-"+c.name+".yaml", fmt.Sprintf(genClaimFile, c.name, false))
	r.a.waitPod("default", "use-"+c.name, 10*time.Second, func(p apiPod) bool { return p.Ready && p.volume("store").Error == "" })
	return true
}

// saveLogs writes the logs of every agent of the run to a file for a
// failed run, and says where.
func (r *genRun) saveLogs(seed uint64) {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("evidence-%d.log", seed))
	if err := os.WriteFile(path, []byte(r.logs.String()+r.a.logs.String()), 0o600); err == nil {
		r.t.Logf("the logs of every agent of the run: %s", path)
	}
}

// keepLogs keeps the logs of the agent about to stop.
func (r *genRun) keepLogs() {
	r.logs.WriteString(r.a.logs.String())
	fmt.Fprintf(&r.logs, "---- agent stopped %s\n", time.Now().Format(time.RFC3339Nano))
}

func (r *genRun) restart(crash bool) bool {
	r.keepLogs()
	r.a.restart(crash)
	r.since = time.Now()
	r.waitAllReady()
	return true
}

// emptyAndRestart stops the agent, empties the manifest directory (a disk
// not mounted yet), starts it: nothing is torn down, every pod is Held with
// its data; the manifests back, every pod is Active again.
func (r *genRun) emptyAndRestart() bool {
	r.keepLogs()
	if err := r.a.stop(); err != nil {
		r.t.Fatal(err)
	}
	stash := r.t.TempDir()
	moveAll(r.t, r.a.manifests, stash)
	r.a.start(r.a.extra...)
	time.Sleep(2 * settleDelay)
	for _, p := range r.a.pods() {
		if p.State != "Held" {
			r.t.Errorf("with the manifest directory empty at start, pod %s/%s is %s, want Held", p.Namespace, p.Name, p.State)
		}
	}
	if strings.Contains(r.a.logs.String(), "volume torn down") {
		r.t.Errorf("with the manifest directory empty at start, a volume was torn down")
	}
	r.verifyData("the manifest directory empty")
	moveAll(r.t, stash, r.a.manifests)
	r.since = time.Now()
	r.waitAllReady()
	return true
}

// secondAgent starts another agent, with manifests of its own, on the
// run's root: it is refused, and the first agent's pods keep their data.
func (r *genRun) secondAgent() bool {
	other := r.t.TempDir()
	r.write(filepath.Join(other, "other.yaml"), scratchPod("intruder"))
	cmd := exec.Command(binary, "--manifests", other, "--root-dir", r.a.root, "--node-name", "node-1", "--status-addr", freeAddr(r.t))
	cmd.Env = append(os.Environ(), "VOLUME_AGENT_TEST_LOCK_WAIT=50ms")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "is in use by process") {
		r.t.Errorf("a second agent on the root: %v\n%s", err, tail(string(out), 10))
	}
	return true
}

// waitAllReady waits until every live pod, and every live claim's pod, is
// ready with its volumes where they were.
func (r *genRun) waitAllReady() {
	for _, o := range r.pods {
		p := r.a.waitPod("default", o.name, 20*time.Second, ready)
		if p.volume("data").Path != o.data || (o.eph && p.volume("eph").Path != o.ephPath) {
			r.t.Errorf("pod %s (%s) came back with other volumes: %+v", o.name, o.token, p.Volumes)
		}
	}
	for _, c := range r.claims {
		if c.live {
			r.a.waitPod("default", "use-"+c.name, 20*time.Second, ready)
		}
	}
}

// verify checks the invariants after a step.
func (r *genRun) verify(after string) {
	r.verifyData(after)
	live := map[string]bool{}
	for _, o := range r.pods {
		for _, dir := range o.dirs() {
			live[dir] = true // a pod of the same name has the same emptyDir path
		}
	}
	for _, g := range r.gone {
		if !r.overdue(g.at) {
			continue
		}
		for _, p := range g.paths {
			if _, err := os.Lstat(p); !os.IsNotExist(err) && !live[p] {
				r.t.Errorf("after %s: the %s, gone %v ago, is still at %s (%v)", after, g.what, time.Since(g.at).Round(time.Millisecond), p, err)
			}
		}
	}
	for _, c := range r.claims {
		if c.live || !r.overdue(c.gone) {
			continue
		}
		if got := entries(r.t, r.data); slices.ContainsFunc(got, func(e string) bool { return strings.HasSuffix(e, c.pv) }) {
			r.t.Errorf("after %s: claim %s, gone %v ago, still has storage: %v", after, c.name, time.Since(c.gone).Round(time.Millisecond), got)
		}
	}
	if sum := r.canarySum(); sum != r.sum {
		r.t.Errorf("after %s: %s, outside the agent's directories, changed", after, r.canary)
	}
}

// overdue reports whether the storage of an owner observed gone at has
// had the settle time plus the reclaim delay (and slack) to go, counted
// while the running agent ran with the manifests in place.
func (r *genRun) overdue(at time.Time) bool {
	if at.Before(r.since) {
		at = r.since
	}
	return time.Since(at) > settleDelay+genReclaimDelay+genSlack
}

// verifyData checks that every live owner's data is intact and alone in
// its volumes.
func (r *genRun) verifyData(after string) {
	for _, o := range r.pods {
		for _, dir := range o.dirs() {
			r.check(filepath.Join(dir, "marker"), o.token, fmt.Sprintf("after %s, pod %s", after, o.name))
			if got := entries(r.t, dir); !slices.Equal(got, []string{"marker"}) {
				r.t.Errorf("after %s: pod %s's volume %s holds %v", after, o.name, dir, got)
			}
		}
	}
	for _, c := range r.claims {
		if c.live {
			r.check(filepath.Join(c.path, "marker"), c.token, fmt.Sprintf("after %s, claim %s", after, c.name))
		}
	}
}

func (r *genRun) check(path, want, what string) {
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want {
		r.t.Errorf("%s: %s holds %q (%v), want %q", what, path, got, err, want)
	}
}

func (r *genRun) write(path, content string) {
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// canarySum is a checksum of the canary directory's names and contents.
func (r *genRun) canarySum() string {
	h := sha256.New()
	for _, e := range entries(r.t, r.canary) {
		b, err := os.ReadFile(filepath.Join(r.canary, e))
		if err != nil {
			r.t.Fatal(err)
		}
		fmt.Fprintf(h, "%s\x00%s\x00", e, b)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}
