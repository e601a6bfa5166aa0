package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// claimFaultDelay is the --reclaim-delay of the claims' fault-injection
// run: short, so that storage is really deleted and archived during the
// run, and long against the run's steps, so that deleting too early shows.
const claimFaultDelay = 3 * time.Second

// claimFaultStatic is a static local PV (policy Retain, as the binder
// treats every PV of the manifests) of class "static" for claim %[1]s.
const claimFaultStatic = `
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-%[1]s}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: static
  claimRef: {namespace: default, name: %[1]s}
  local: {path: %[2]s}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [node-1]}]
`

// faultClaim is one claim of the run, with its pod use-<name>.
type faultClaim struct {
	name, class string
	// claimFile and podFile are where they are written ("" while removed).
	claimFile, podFile string
	// removedAt is when the claim's file was last removed, while the claim
	// was not there again since; zero while it is there.
	removedAt time.Time
	// markers are the files written into the volume that must all be
	// there, or (once the claim was away for the reclaim delay) all gone.
	markers []string
	// before are the markers of a volume the claim may have lost (it was
	// away for the reclaim delay): its next volume holds all of them, or
	// none.
	before []string
	next   int
	// dirs are the directories under the local path root the claim's
	// volumes had (a Delete volume provisioned again gets the same name).
	pv string
}

// claimFaultRun is the state of the claims' fault-injection run.
type claimFaultRun struct {
	t       *testing.T
	e       *provEnv
	rng     *rand.Rand
	claims  []*faultClaim
	outside string // files no operation may touch
	stats   map[string]int
	// released is set when a claim and its pod are both gone since the
	// last step.
	released bool
}

// TestClaimFaultInjection: while claims of Delete, archiveOnDelete and
// Retain classes and of static PVs are bound, written to, removed with and
// without their pods, written again with `rm; cp`, their pods moved
// between files and the whole manifest directory emptied and refilled, the
// agent is SIGKILLed at random moments at least 50 times (sometimes
// stopped with SIGTERM, sometimes while the directory is empty). At every
// step: the data of a claim that exists, or was removed less than the
// reclaim delay ago, is all there, in place or aside; a volume is never
// half there. At the end, with every claim back: each pod is ready with all
// its data, or (for a Delete claim that was away for the delay) with none
// of it; no directory is shared by two PVs; no claim is Bound to missing
// storage; nothing outside the volumes changed. VOLUME_AGENT_FAULT_SEED
// replays a run.
func TestClaimFaultInjection(t *testing.T) {
	seed := envUint(t, faultSeedEnv, uint64(time.Now().UnixNano()))
	t.Logf("claim fault injection seed %d (replay with %s=%d)", seed, faultSeedEnv, seed)
	e := newProvEnv(t)
	r := &claimFaultRun{t: t, e: e, rng: rand.New(rand.NewPCG(seed, seed^0xc1a1)), stats: map[string]int{},
		outside: filepath.Join(t.TempDir(), "outside")}
	outsideSums := makeData(t, r.rng, r.outside)
	var statics []string
	for i, class := range []string{"gone", "gone", "archive", "keep", "static", "static"} {
		c := &faultClaim{name: fmt.Sprintf("c%d", i), class: class}
		if class == "static" {
			disk := filepath.Join(t.TempDir(), c.name)
			if err := os.Mkdir(disk, 0o755); err != nil {
				t.Fatal(err)
			}
			statics = append(statics, fmt.Sprintf(claimFaultStatic, c.name, disk))
			c.pv = "pv-" + c.name
		}
		r.claims = append(r.claims, c)
		r.addClaim(c)
	}
	e.writeManifest("static.yaml", strings.Join(statics, "---"))
	e.start("--reclaim-delay", claimFaultDelay.String())

	start, kills := time.Now(), 0
	for kills < 50 {
		for range 1 + r.rng.IntN(3) {
			r.change()
		}
		wait := time.Duration(r.rng.IntN(1500)) * time.Millisecond
		if r.rng.IntN(6) == 0 || (r.released && r.rng.IntN(2) == 0) {
			// A quiet spell: removals count (a removal the agent did not
			// see is never acted on), released storage goes aside and is
			// deleted.
			wait += claimFaultDelay + time.Second
		}
		r.released = false
		time.Sleep(wait)
		r.mark()
		r.countLogs()
		if r.rng.IntN(8) == 0 {
			if err := e.stop(); err != nil {
				t.Fatalf("agent exit after SIGTERM: %v", err)
			}
			r.stats["SIGTERMs"]++
		} else {
			e.kill()
			kills++
		}
		if r.rng.IntN(10) == 0 {
			r.emptiedAcrossARestart()
		}
		e.start(e.extra...)
		r.checkNothingLostEarly()
	}
	figure(t, fmt.Sprintf("claim fault injection: %d SIGKILLs", kills), time.Since(start))
	t.Logf("claim fault injection did: %v", r.stats)
	for _, c := range r.claims {
		if c.claimFile == "" {
			r.addClaim(c)
		} else if c.podFile == "" {
			r.addPod(c)
		}
	}
	r.checkEnd(outsideSums)
}

// change makes one random change to the claims and pods.
func (r *claimFaultRun) change() {
	c := r.claims[r.rng.IntN(len(r.claims))]
	switch n := r.rng.IntN(10); {
	case c.claimFile == "":
		if n < 3 { // now and then: a removed claim stays away long enough to be deleted
			r.addClaim(c)
		}
	case c.podFile == "":
		if n < 6 {
			r.addPod(c)
		} else {
			r.removeClaim(c)
		}
	case n < 3:
		r.removePod(c)
		r.removeClaim(c)
	case n < 5:
		r.removePod(c)
	case n < 6:
		r.removeClaim(c) // held while the pod names it
	case n < 8:
		r.rewriteClaim(c)
	default:
		r.movePod(c)
	}
}

func (r *claimFaultRun) addClaim(c *faultClaim) {
	if !c.removedAt.IsZero() && time.Since(c.removedAt) >= claimFaultDelay && c.class != "keep" && c.class != "static" {
		c.before = append(c.before, c.markers...) // its volume may be gone for good, or not: checked at its next ready pod
		c.markers = nil
	}
	c.removedAt = time.Time{}
	claim := fmt.Sprintf(classClaim, c.name, c.class)
	c.claimFile = "claim-" + c.name + ".yaml"
	r.e.writeManifest(c.claimFile, claim)
	if c.podFile == "" {
		r.addPod(c)
	}
	r.stats["claims added"]++
}

func (r *claimFaultRun) addPod(c *faultClaim) {
	c.podFile = "pod-" + c.name + "-a.yaml"
	r.e.writeManifest(c.podFile, fmt.Sprintf(classPod, "use-"+c.name, c.name))
	r.stats["pods added"]++
}

func (r *claimFaultRun) removePod(c *faultClaim) {
	r.e.removeManifest(c.podFile)
	c.podFile = ""
	r.released = r.released || c.claimFile == ""
	r.stats["pods removed"]++
}

func (r *claimFaultRun) removeClaim(c *faultClaim) {
	r.e.removeManifest(c.claimFile)
	c.claimFile, c.removedAt = "", time.Now()
	r.released = r.released || c.podFile == ""
	r.stats["claims removed"]++
}

// rewriteClaim removes the claim's file and writes it again 300 ms later,
// as config tools do.
func (r *claimFaultRun) rewriteClaim(c *faultClaim) {
	path := filepath.Join(r.e.manifests, c.claimFile)
	data, err := os.ReadFile(path)
	if err != nil {
		r.t.Fatal(err)
	}
	r.e.removeManifest(c.claimFile)
	time.Sleep(300 * time.Millisecond)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		r.t.Fatal(err)
	}
	r.stats["claim files rewritten"]++
}

// movePod renames the pod's file to another name.
func (r *claimFaultRun) movePod(c *faultClaim) {
	to := "pod-" + c.name + "-b.yaml"
	if c.podFile == to {
		to = "pod-" + c.name + "-a.yaml"
	}
	if err := os.Rename(filepath.Join(r.e.manifests, c.podFile), filepath.Join(r.e.manifests, to)); err != nil {
		r.t.Fatal(err)
	}
	c.podFile = to
	r.stats["pods moved between files"]++
}

// countLogs counts, into the stats, what the running agent logged of the
// storage so far: that the run moves aside, restores, deletes and archives.
func (r *claimFaultRun) countLogs() {
	logs := r.e.logs.String()
	for stat, msg := range map[string]string{
		"storage moved aside": "local volume moved aside until its deletion", "storage restored": "local volume restored",
		"storage removed": "removed local volume", "storage archived": "archived local volume",
	} {
		r.stats[stat] += strings.Count(logs, `"msg":"`+msg+`"`)
	}
}

// emptiedAcrossARestart moves every manifest away while the agent is down,
// runs it on the empty directory for a while, and puts them back.
func (r *claimFaultRun) emptiedAcrossARestart() {
	saved := r.t.TempDir()
	moveAll(r.t, r.e.manifests, saved)
	r.e.start(r.e.extra...)
	time.Sleep(time.Duration(500+r.rng.IntN(2000)) * time.Millisecond)
	r.checkNothingLostEarly()
	r.countLogs()
	if r.rng.IntN(2) == 0 {
		r.e.kill()
	} else if err := r.e.stop(); err != nil {
		r.t.Fatal(err)
	}
	moveAll(r.t, saved, r.e.manifests)
	r.stats["manifest directory emptied across a restart"]++
}

// mark writes a new marker into the volume of every claim whose pod the
// agent reports ready, after checking that the volume holds the markers
// it must.
func (r *claimFaultRun) mark() {
	code, _ := r.e.get("/v1/pods")
	if code != 200 {
		return
	}
	for _, c := range r.claims {
		if c.claimFile == "" || c.podFile == "" {
			continue
		}
		p, ok := r.e.pod("default", "use-"+c.name)
		if !ok || !p.Ready {
			continue
		}
		v := p.volume("store")
		r.checkVolume(c, v.Path, v.PV)
		name := fmt.Sprintf("marker-%03d", c.next)
		c.next++
		if err := os.WriteFile(filepath.Join(v.Path, name), []byte(c.name), 0o644); err != nil {
			r.t.Fatalf("write %s into %s: %v", name, c.name, err)
		}
		c.markers = append(c.markers, name)
		r.stats["markers written"]++
	}
}

// checkVolume checks the volume at path of claim c: all its markers, or,
// for a claim whose markers were forgotten (away for the reclaim delay),
// none of those the volume had before.
func (r *claimFaultRun) checkVolume(c *faultClaim, path, pv string) {
	have := markersIn(r.t, path)
	if c.pv != "" && c.pv != pv && (c.class == "keep" || c.class == "static") {
		r.t.Fatalf("claim %s (%s) moved from PV %s to %s", c.name, c.class, c.pv, pv)
	}
	c.pv = pv
	for _, m := range c.markers {
		if !slices.Contains(have, m) {
			r.t.Fatalf("claim %s lost %s: its volume holds %v, want all of %v", c.name, m, have, c.markers)
		}
	}
	if len(c.before) == 0 {
		return
	}
	// Away for the delay: all of the old data back, or none of it.
	back := 0
	for _, m := range c.before {
		if slices.Contains(have, m) {
			back++
		}
	}
	switch back {
	case 0:
		r.stats["volumes new after the delay"]++
	case len(c.before):
		c.markers = append(c.before, c.markers...)
		r.stats["volumes given back whole after the delay"]++
	default:
		r.t.Fatalf("claim %s got a volume with %d of the %d files of the one it released: %v, want all or none of %v",
			c.name, back, len(c.before), have, c.before)
	}
	c.before = nil
}

// markersIn lists the markers in dir.
func markersIn(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatalf("read %s: %v", dir, err)
	}
	var out []string
	for _, d := range des {
		if strings.HasPrefix(d.Name(), "marker-") {
			out = append(out, d.Name())
		}
	}
	return out
}

// checkNothingLostEarly: the data of a provisioned claim that exists, or
// was removed less than the reclaim delay ago, is all there, in its
// volume's directory or moved aside, never partly.
func (r *claimFaultRun) checkNothingLostEarly() {
	for _, c := range r.claims {
		if c.pv == "" || c.class == "static" || len(c.markers) == 0 {
			continue
		}
		if !c.removedAt.IsZero() && time.Since(c.removedAt) >= claimFaultDelay-time.Second {
			continue
		}
		in := markersIn(r.t, filepath.Join(r.e.data, "default-"+c.name+"-"+c.pv))
		aside := markersIn(r.t, filepath.Join(r.e.data, ".pending-delete-"+c.pv))
		for _, m := range c.markers {
			if !slices.Contains(in, m) && !slices.Contains(aside, m) {
				r.t.Fatalf("claim %s (removed %v ago) lost %s before the reclaim delay: in place %v, aside %v",
					c.name, time.Since(c.removedAt).Round(time.Millisecond), m, in, aside)
			}
		}
	}
}

// checkEnd: every claim back, every pod ready with all its data (or none
// of a Delete volume away for the delay), no directory shared by two PVs,
// no claim Bound to missing storage, nothing outside changed.
func (r *claimFaultRun) checkEnd(outsideSums map[string][32]byte) {
	t := r.t
	waitFor(t, 60*time.Second, "every pod ready", func() (bool, string) {
		for _, c := range r.claims {
			if p, ok := r.e.pod("default", "use-"+c.name); !ok || !p.Ready {
				return false, fmt.Sprintf("use-%s: %+v; claims %+v", c.name, p, r.e.claims())
			}
		}
		return true, ""
	})
	pvs := map[string]string{}
	for _, c := range r.claims {
		v := r.e.waitPod("default", "use-"+c.name, time.Second, ready).volume("store")
		r.checkVolume(c, v.Path, v.PV)
		if other, ok := pvs[v.PV]; ok {
			t.Errorf("claims %s and %s share PV %s", other, c.name, v.PV)
		}
		pvs[v.PV] = c.name
	}
	for _, cl := range r.e.claims() {
		if cl.Phase != "Bound" || !strings.HasPrefix(cl.PV, "pvc-") {
			continue
		}
		if _, err := os.Stat(filepath.Join(r.e.data, "default-"+cl.Name+"-"+cl.PV)); err != nil {
			t.Errorf("claim %s is Bound to PV %s whose storage is missing: %v", cl.Name, cl.PV, err)
		}
	}
	checkData(t, "outside the volumes", r.outside, outsideSums)
}
