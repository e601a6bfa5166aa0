package e2e

import (
	"encoding/json"
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

	"golang.org/x/sys/unix"
)

// capFaultKills is how many times each backend's run SIGKILLs the agent:
// enough to cut creations, expansions and deletions short, few enough
// that both runs together take well under a minute.
const capFaultKills = 12

// At most capFaultVolumes claims hold a volume at once, each of at most
// capFaultMaxMiB: together well within the room of the 512 MiB btrfs
// root (a claim that does not fit would be refused, rightly).
const (
	capFaultVolumes = 6
	capFaultMaxMiB  = 48
)

// capFaultClaim is claim %[1]s of expandableClass ("sized": enforced,
// Delete, expandable) asking for %[2]d MiB, with its pod use-%[1]s, in one
// file: removing the file releases the claim.
const capFaultClaim = `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %[1]s}
spec:
  storageClassName: sized
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: %[2]dMi}}
---
apiVersion: v1
kind: Pod
metadata: {name: use-%[1]s}
spec:
  containers: [{name: c, image: busybox}]
  volumes: [{name: store, persistentVolumeClaim: {claimName: %[1]s}}]
`

// capClaim is one claim of a capacity fault-injection run.
type capClaim struct {
	name string
	mib  int // the size its manifest asks for
	// removed: its file is gone, for good (the name is not used again:
	// its volume is deleted, never given back). A removal while the agent
	// was down counts too, once the agent has started with the directory
	// listing objects for the settle time (issue 27).
	removed bool
	// pv and fsid, once seen, are its volume's PV and the identity of the
	// volume's file system (an ext4 image's UUID, a subvolume's ID): a
	// volume formatted or made again has another.
	pv   string
	fsid unix.Fsid
	// markers are the files written into the volume: all must stay.
	markers []string
}

// capFaultRun is the state of one backend's run.
type capFaultRun struct {
	t      *testing.T
	a      *agent
	rng    *rand.Rand
	root   string // --local-path-root
	kind   string // "btrfs" or "image"
	expand bool   // whether claims are expanded (an image needs CAP_SYS_RESOURCE)
	claims []*capClaim
	stats  map[string]int
}

// TestCapacityFaultInjection: claims of a class that enforces capacity
// are provisioned, written to, expanded and deleted while the agent is
// SIGKILLed at random moments (now and then stopped with SIGTERM, and now
// and then a claim added or removed while it is down), on a btrfs root
// with quotas (subvolumes and qgroups) and on an ext4 root (images on loop
// devices). After every restart, each volume holds every file written into
// it and is the same file system (never formatted or made again). At the
// end: every claim is Bound with its pod ready, at the size it asks for;
// the root holds exactly the volumes of the claims (no orphan subvolume,
// image, loop device, qgroup, mount or record); and once the claims are
// removed, nothing at all is left. VOLUME_AGENT_FAULT_SEED replays a run.
func TestCapacityFaultInjection(t *testing.T) {
	seed := envUint(t, faultSeedEnv, uint64(time.Now().UnixNano()))
	t.Logf("capacity fault injection seed %d (replay with %s=%d)", seed, faultSeedEnv, seed)
	t.Run("btrfs", func(t *testing.T) {
		root := btrfsLocalRoot(t, true)
		runCapacityFaults(t, seed, root, "btrfs", true)
	})
	t.Run("image", func(t *testing.T) {
		root := imageLocalRoot(t)
		grow := capSysResource(t)
		if !grow {
			t.Log("no CAP_SYS_RESOURCE: the kernel grows no mounted ext4, so claims are not expanded (TestEnforcedClaimExpandsOnImages skips too)")
		}
		runCapacityFaults(t, seed, root, "image", grow)
	})
}

func runCapacityFaults(t *testing.T, seed uint64, root, kind string, expand bool) {
	a := newAgent(t)
	r := &capFaultRun{t: t, a: a, rng: rand.New(rand.NewPCG(seed, seed^0xcab)), root: root, kind: kind, expand: expand,
		stats: map[string]int{}}
	a.writeManifest("class.yaml", expandableClass) // stays: an emptied directory releases nothing
	for range 2 {
		r.add()
	}
	a.start("--provisioners", "local", "--local-path-root", root, "--reclaim-delay", "0s")
	r.root = resolved(t, root)
	start, kills := time.Now(), 0
	for kills < capFaultKills {
		for range 1 + r.rng.IntN(2) {
			r.change()
		}
		// A manifest change is acted on once its file settled (0.75 s):
		// the kill falls before, during or after the steps it causes, or
		// just after the backend recorded a step, or the moment a volume
		// is made, before the agent records its PV (and its claim then
		// goes while the agent is down).
		var made string
		switch r.rng.IntN(4) {
		case 0:
			r.mark()
			if r.waitForStep(2*time.Second, false) != "" {
				time.Sleep(time.Duration(r.rng.IntN(100)) * time.Millisecond)
				r.stats["kills during a step"]++
			}
		case 1:
			r.mark()
			r.add() // a volume to make
			made = r.waitForStep(2500*time.Millisecond, true)
		default:
			time.Sleep(time.Duration(r.rng.IntN(2200)) * time.Millisecond)
			r.mark()
		}
		r.countLogs()
		if made == "" && r.rng.IntN(8) == 0 {
			if err := a.stop(); err != nil {
				t.Fatalf("agent exit after SIGTERM: %v", err)
			}
			r.stats["SIGTERMs"]++
		} else {
			a.kill()
			kills++
		}
		if c := r.claimOfVolume(made); c != nil && !c.removed {
			r.a.removeManifest(c.file())
			c.removed = true
			r.stats["claims removed as their volume was made"]++
		}
		if r.rng.IntN(4) == 0 {
			r.change() // seen at the next start
			r.stats["changes while down"]++
		}
		a.start(a.extra...)
		r.checkNothingLost()
	}
	figure(t, fmt.Sprintf("capacity fault injection (%s): %d SIGKILLs", kind, kills), time.Since(start))
	t.Logf("capacity fault injection (%s) did: %v", kind, r.stats)
	r.checkEnd()
}

// change makes one random change: a claim added, expanded or removed.
func (r *capFaultRun) change() {
	live := r.live()
	switch n := r.rng.IntN(10); {
	case n < 4 && len(live) < 4, len(live) == 0:
		r.add()
	case n < 7 && r.expand:
		c := live[r.rng.IntN(len(live))]
		if c.pv == "" || c.mib >= capFaultMaxMiB {
			return // a claim is expanded once Bound (the API server refuses it before)
		}
		c.mib = min(capFaultMaxMiB, c.mib+4*(1+r.rng.IntN(3)))
		r.a.writeManifest(c.file(), fmt.Sprintf(capFaultClaim, c.name, c.mib))
		r.stats["claims expanded"]++
	case n < 9:
		c := live[r.rng.IntN(len(live))]
		r.a.removeManifest(c.file())
		c.removed = true
		r.stats["claims removed"]++
	}
}

// add adds a new claim while fewer than capFaultVolumes hold a volume.
func (r *capFaultRun) add() {
	holding := 0
	for _, c := range r.claims {
		if !c.removed {
			holding++
		}
	}
	if holding >= capFaultVolumes {
		return
	}
	c := &capClaim{name: fmt.Sprintf("c%d", len(r.claims)), mib: 16 + 8*r.rng.IntN(2)}
	r.claims = append(r.claims, c)
	r.a.writeManifest(c.file(), fmt.Sprintf(capFaultClaim, c.name, c.mib))
	r.stats["claims added"]++
}

func (c *capClaim) file() string { return "claim-" + c.name + ".yaml" }

// live lists the claims whose files are there.
func (r *capFaultRun) live() []*capClaim {
	var out []*capClaim
	for _, c := range r.claims {
		if !c.removed {
			out = append(out, c)
		}
	}
	return out
}

// waitForStep waits up to d until the backend records a step under way
// that it had not when called (a record not ready), or, when made is set,
// a volume made (a record ready with a new size), and returns that
// volume's name ("" if none).
func (r *capFaultRun) waitForStep(d time.Duration, made bool) string {
	before := r.steps()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
		for name, st := range r.steps() {
			if st != before[name] && strings.HasPrefix(st, "ready") == made {
				return strings.TrimSuffix(name, ".json")
			}
		}
	}
	return ""
}

// claimOfVolume is the claim whose volume is named vol, or nil.
func (r *capFaultRun) claimOfVolume(vol string) *capClaim {
	for _, c := range r.claims {
		if vol != "" && strings.HasPrefix(vol, "default-"+c.name+"-pvc-") {
			return c
		}
	}
	return nil
}

// steps reads the backend's records: by volume, its state and size.
func (r *capFaultRun) steps() map[string]string {
	dir := filepath.Join(r.root, ".capacity")
	out := map[string]string{}
	for _, name := range capacityRecords(r.t, r.root) {
		var rec struct {
			State string
			Size  int64
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || json.Unmarshal(b, &rec) != nil {
			continue // renamed or removed meanwhile
		}
		out[name] = fmt.Sprint(rec.State, " ", rec.Size)
	}
	return out
}

// countLogs counts, into the stats, the steps the agent logged: finished,
// and (after a restart) rolled back or finished by its recovery.
func (r *capFaultRun) countLogs() {
	logs := r.a.logs.String()
	for stat, msg := range map[string]string{
		"volumes created": "volume created", "volumes expanded": "volume expanded", "volumes deleted": "volume deleted",
		"unfinished volumes rolled back": "unfinished volume removed", "failed operations": "storage operation failed",
	} {
		r.stats[stat] += strings.Count(logs, `"msg":"`+msg+`"`)
	}
}

// dir is the volume of c under the root (c.pv known).
func (r *capFaultRun) dir(c *capClaim) string {
	return filepath.Join(r.root, "default-"+c.name+"-"+c.pv)
}

// mark checks and writes a new file into the volume of every claim whose
// pod the agent reports ready.
func (r *capFaultRun) mark() {
	if code, _ := r.a.get("/v1/pods"); code != 200 {
		return
	}
	for _, c := range r.live() {
		p, ok := r.a.pod("default", "use-"+c.name)
		if !ok || !p.Ready {
			continue
		}
		v := p.volume("store")
		if c.pv != "" && c.pv != v.PV {
			r.t.Fatalf("claim %s moved from PV %s to %s", c.name, c.pv, v.PV)
		}
		first := c.pv == ""
		c.pv = v.PV
		if ok, why := r.holds(c, v.Path); !ok {
			r.t.Fatalf("the pod's volume: %s", why)
		}
		if first {
			c.fsid = fsidOf(r.t, r.dir(c))
		}
		name := fmt.Sprintf("marker-%03d", len(c.markers))
		if err := os.WriteFile(filepath.Join(v.Path, name), []byte(c.name), 0o644); err != nil {
			r.t.Fatalf("write %s into %s: %v", name, c.name, err)
		}
		c.markers = append(c.markers, name)
		r.stats["markers written"]++
	}
}

// holds reports whether dir, a view of the volume of c, is its file
// system and holds all its markers, and if not, why.
func (r *capFaultRun) holds(c *capClaim, dir string) (bool, string) {
	if len(c.markers) == 0 {
		return true, ""
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, fmt.Sprintf("claim %s: statfs %s: %v", c.name, dir, err)
	}
	if st.Fsid != c.fsid {
		return false, fmt.Sprintf("claim %s: %s is file system %v, was %v: formatted or made again (or not mounted)", c.name, dir, st.Fsid, c.fsid)
	}
	have := markersIn(r.t, dir)
	for _, m := range c.markers {
		if !slices.Contains(have, m) {
			return false, fmt.Sprintf("claim %s lost %s: %s holds %v, want all of %v", c.name, m, dir, have, c.markers)
		}
	}
	return true, ""
}

// checkNothingLost: after a restart, the volume of every claim that has
// one is, once recovered (an image mounted again), the same file system
// with all its files.
func (r *capFaultRun) checkNothingLost() {
	for _, c := range r.live() {
		if c.pv == "" {
			continue
		}
		waitFor(r.t, 20*time.Second, "the volume of "+c.name+" whole after a restart", func() (bool, string) {
			return r.holds(c, r.dir(c))
		})
	}
}

// checkEnd: every claim Bound, its pod ready with all its data at the size
// it asks for, every removed claim deleted (those removed while the agent
// was down too), and under the root exactly the volumes of the Bound
// claims; then, the claims removed, nothing left.
func (r *capFaultRun) checkEnd() {
	t := r.t
	waitFor(t, 60*time.Second, "every pod ready at its size, every removal done", func() (bool, string) {
		cls := r.a.claims()
		for _, c := range r.claims {
			p, ok := r.a.pod("default", "use-"+c.name)
			cl := claimOf(cls, c.name)
			want := fmt.Sprintf("%dMi", c.mib)
			switch {
			case c.removed && cl.Name != "":
				return false, fmt.Sprintf("removed claim %s: %+v", c.name, cl)
			case !c.removed && (!ok || !p.Ready || cl.Capacity != want || cl.Error != ""):
				return false, fmt.Sprintf("use-%s: %+v; claim %+v, want %s", c.name, p, cl, want)
			}
		}
		return true, ""
	})
	r.mark() // checks every volume in use through its pod
	var want []string
	for _, cl := range r.a.claims() {
		if cl.Phase != "Bound" {
			t.Errorf("claim %s is %s: %s", cl.Name, cl.Phase, cl.Error)
		}
		want = append(want, "default-"+cl.Name+"-"+cl.PV)
	}
	for _, c := range r.live() {
		if r.kind == "btrfs" {
			r.checkLimit(c)
		}
	}
	r.checkOnly(want)
	r.removeAll()
	r.checkOnly(nil)
	if m := mountsUnder(t, r.a.resolvedRoot()); len(m) != 0 {
		t.Errorf("mounts left under the agent's root: %v", m)
	}
}

// removeAll removes every claim and waits until they are deleted.
func (r *capFaultRun) removeAll() {
	t := r.t
	for _, c := range r.live() {
		r.a.removeManifest(c.file())
		c.removed = true
	}
	waitFor(t, 60*time.Second, "every claim deleted", func() (bool, string) {
		cls := r.a.claims()
		return len(cls) == 0 && len(entries(t, r.root)) == 0, fmt.Sprintf("claims %+v, root %v", cls, entries(t, r.root))
	})
}

// checkOnly checks that the root holds the volumes named vols and nothing
// else of the backend's: no other entry, record, loop device, mount,
// subvolume or qgroup.
func (r *capFaultRun) checkOnly(vols []string) {
	t := r.t
	t.Helper()
	var wantEntries, wantRecords, wantMounts, wantLoops []string
	for _, v := range vols {
		wantEntries = append(wantEntries, v)
		wantRecords = append(wantRecords, v+".json")
		if r.kind == "image" {
			wantEntries = append(wantEntries, v+".img")
			wantMounts = append(wantMounts, filepath.Join(r.root, v))
			wantLoops = append(wantLoops, filepath.Join(r.root, v+".img"))
		}
	}
	for _, c := range []struct {
		what      string
		got, want []string
	}{
		{"entries of the root", entries(t, r.root), wantEntries},
		{"records", capacityRecords(t, r.root), wantRecords},
		{"mounts under the root", slices.DeleteFunc(mountsUnder(t, r.root), func(m string) bool { return m == r.root }), wantMounts},
		{"loop devices of images under the root", loopsUnder(t, r.root), wantLoops},
	} {
		slices.Sort(c.got)
		slices.Sort(c.want)
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	if r.kind != "btrfs" {
		return
	}
	subs, qgroups := subvolumesOf(t, r.root)
	slices.Sort(subs)
	if !slices.Equal(subs, vols) {
		t.Errorf("subvolumes: %v, want %v", subs, vols)
	}
	if len(qgroups) != len(vols)+1 { // and 0/5, the top level's
		t.Errorf("qgroups %v, want one per volume %v (0/ID) and the top level's", qgroups, vols)
	}
}

// checkLimit checks that the qgroup of the volume of c (its subvolume's,
// level 0) limits it to the size its claim asks for.
func (r *capFaultRun) checkLimit(c *capClaim) {
	out, err := exec.Command("btrfs", "qgroup", "show", "--raw", "-re", r.root).CombinedOutput()
	if err != nil {
		r.t.Fatalf("btrfs qgroup show %s: %v: %s", r.root, err, out)
	}
	want, group := strconv.Itoa(c.mib<<20), fmt.Sprintf("0/%d", subvolumeID(r.t, r.dir(c)))
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[0] == group {
			if f[3] != want {
				r.t.Errorf("claim %s of %d MiB: its qgroup limits it to %s bytes: %s", c.name, c.mib, f[3], out)
			}
			return
		}
	}
	r.t.Errorf("claim %s: no qgroup: %s", c.name, out)
}

// loopsUnder lists the backing files under dir of the loop devices.
func loopsUnder(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // detached meanwhile
		}
		if back := strings.TrimSpace(string(b)); strings.HasPrefix(back, dir+"/") {
			out = append(out, strings.TrimSuffix(back, " (deleted)"))
		}
	}
	return out
}

// subvolumesOf lists the subvolumes of the btrfs mounted on root, by path,
// and its qgroups.
func subvolumesOf(t *testing.T, root string) (subs, qgroups []string) {
	t.Helper()
	out, err := exec.Command("btrfs", "subvolume", "list", "-o", root).CombinedOutput()
	if err != nil {
		t.Fatalf("btrfs subvolume list %s: %v: %s", root, err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			subs = append(subs, f[len(f)-1])
		}
	}
	out, err = exec.Command("btrfs", "qgroup", "show", "--raw", root).CombinedOutput()
	if err != nil {
		t.Fatalf("btrfs qgroup show %s: %v: %s", root, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && (strings.HasPrefix(f[0], "0/") || strings.HasPrefix(f[0], "1/")) {
			qgroups = append(qgroups, f[0])
		}
	}
	return subs, qgroups
}

// fsidOf is the identity of the file system dir is on.
func fsidOf(t *testing.T, dir string) unix.Fsid {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	return st.Fsid
}

// resolved is path without symlinks, as the agent and the kernel name it.
func resolved(t *testing.T, path string) string {
	t.Helper()
	p, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
