package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// apiUsage is a volume's usage as /v1/pods serves it.
type apiUsage struct {
	CapacityBytes, AvailableBytes, UsedBytes uint64
	Inodes, InodesFree, InodesUsed           uint64
	Method                                   string
	Time                                     time.Time
}

// usageOf returns the usage of every volume of pod namespace/name, by
// volume name, from /v1/pods.
func (a *agent) usageOf(namespace, name string) map[string]*apiUsage {
	a.t.Helper()
	code, body := a.get("/v1/pods")
	if code != 200 {
		a.t.Fatalf("/v1/pods: %d %s", code, body)
	}
	var out struct {
		Pods []struct {
			Namespace, Name string
			Volumes         []struct {
				Name  string
				Usage *apiUsage
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		a.t.Fatalf("/v1/pods: %v", err)
	}
	got := map[string]*apiUsage{}
	for _, p := range out.Pods {
		if p.Namespace == namespace && p.Name == name {
			for _, v := range p.Volumes {
				got[v.Name] = v.Usage
			}
		}
	}
	return got
}

const usagePod = `
apiVersion: v1
kind: Pod
metadata: {name: usage}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: scratch, emptyDir: {}}
  - {name: cache, emptyDir: {medium: Memory, sizeLimit: 16Mi}}
  - {name: store, persistentVolumeClaim: {claimName: data}}
`

// within reports whether got is want to within 5 %.
func within(got, want uint64) bool {
	return math.Abs(float64(got)-float64(want)) <= 0.05*float64(want)
}

// TestVolumeUsage: with --volume-stats-period=1s, 5 MiB written into a disk
// emptyDir (walked), a Memory emptyDir (its tmpfs, by statfs) and a local
// PV's directory (a bind mount of a subdirectory: walked) show in
// /v1/pods, in /metrics under the kubelet's labels, and in the status
// CLI's USED and SIZE columns.
func TestVolumeUsage(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("pv.yaml", fmt.Sprintf(localPV, "pv-data", "2Gi", disk(t, "data")))
	a.writeManifest("claim.yaml", dataClaim)
	a.writeManifest("pod.yaml", usagePod)
	a.start("--volume-stats-period=1s")
	p := a.waitPod("default", "usage", 20*time.Second, ready)
	const size = 5 << 20
	for _, name := range []string{"scratch", "cache", "store"} {
		f, err := os.Create(filepath.Join(p.volume(name).Path, "five"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte(strings.Repeat("x", size))); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"scratch": "walk", "cache": "statfs", "store": "walk"}
	var got map[string]*apiUsage
	waitFor(t, 15*time.Second, "usage of 5 MiB in every volume", func() (bool, string) {
		got = a.usageOf("default", "usage")
		for name, method := range want {
			u := got[name]
			if u == nil || u.Method != method || !within(u.UsedBytes, size) {
				b, _ := json.Marshal(got)
				return false, string(b)
			}
		}
		return true, ""
	})
	for name, u := range got {
		if u.CapacityBytes == 0 || u.AvailableBytes > u.CapacityBytes || u.InodesUsed == 0 || u.Inodes == 0 || time.Since(u.Time) > time.Minute {
			t.Errorf("%s: usage %+v", name, *u)
		}
	}
	if got["cache"].CapacityBytes != 16<<20 {
		t.Errorf("Memory emptyDir of sizeLimit 16Mi: capacity %d, want 16 MiB", got["cache"].CapacityBytes)
	}
	if got["scratch"].InodesUsed != 2 {
		t.Errorf("disk emptyDir: %d inodes used, want 2 (the directory and the file)", got["scratch"].InodesUsed)
	}

	t.Run("metrics", func(t *testing.T) {
		for sample, want := range map[string]uint64{
			`volume_agent_volume_stats_used_bytes{namespace="default",persistentvolumeclaim="",pod="usage",volume="scratch"}`:   got["scratch"].UsedBytes,
			`volume_agent_volume_stats_used_bytes{namespace="default",persistentvolumeclaim="",pod="usage",volume="cache"}`:     got["cache"].UsedBytes,
			`volume_agent_volume_stats_used_bytes{namespace="default",persistentvolumeclaim="data",pod="",volume=""}`:           got["store"].UsedBytes,
			`volume_agent_volume_stats_capacity_bytes{namespace="default",persistentvolumeclaim="",pod="usage",volume="cache"}`: 16 << 20,
		} {
			if v := a.metric(sample); !within(uint64(v), want) {
				t.Errorf("%s = %v, want about %d", sample, v, want)
			}
		}
		for _, family := range []string{"capacity_bytes", "available_bytes", "used_bytes", "inodes", "inodes_free", "inodes_used"} {
			sample := `volume_agent_volume_stats_` + family + `{namespace="default",persistentvolumeclaim="data",pod="",volume=""}`
			if a.metric(sample) <= 0 && family != "available_bytes" {
				t.Errorf("%s is 0", sample)
			}
		}
	})

	t.Run("cli", func(t *testing.T) {
		r := runCLI(t, "status", "--addr="+a.addr)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		cells := map[string][]string{}
		for _, line := range strings.Split(r.stdout, "\n") {
			if f := strings.Fields(line); len(f) >= 7 && f[0] == "default/usage" {
				cells[f[1]] = f
			}
		}
		fiveMi := regexp.MustCompile(`^5(\.0)?Mi$`)
		for _, name := range []string{"scratch", "cache", "store"} {
			if f := cells[name]; f == nil || !fiveMi.MatchString(f[5]) || f[6] == "-" {
				t.Errorf("row of %s = %q; want USED 5Mi and a SIZE:\n%s", name, f, r.stdout)
			}
		}
		if f := cells["cache"]; f != nil && f[6] != "16Mi" {
			t.Errorf("SIZE of the 16Mi Memory emptyDir = %q", f[6])
		}
	})
}

const usageHungPod = `
apiVersion: v1
kind: Pod
metadata: {name: hung}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: data, emptyDir: {}}
  - {name: cache, emptyDir: {medium: Memory}}
`

// TestVolumeUsageNeverEntersAHungMount: a FUSE file system mounted inside
// a disk emptyDir hangs. The walks of the volume, every second, stop at
// the mount point without sending it a request, and keep measuring what
// is beside it; the other volume is measured too, and SIGTERM still ends
// the agent promptly.
func TestVolumeUsageNeverEntersAHungMount(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("pod.yaml", usageHungPod)
	a.start("--volume-stats-period=1s")
	p := a.waitPod("default", "hung", 10*time.Second, ready)
	mnt := filepath.Join(p.volume("data").Path, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	fs := mountHangFS(t, mnt)
	fs.hang()
	hungAt := time.Now()
	if err := os.WriteFile(filepath.Join(p.volume("data").Path, "one"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "a measurement of both volumes after the hang, 1 MiB beside the mount", func() (bool, string) {
		got := a.usageOf("default", "hung")
		data, cache := got["data"], got["cache"]
		ok := data != nil && cache != nil && data.Time.After(hungAt.Add(time.Second)) && cache.Time.After(hungAt.Add(time.Second)) &&
			within(data.UsedBytes, 1<<20+8<<10)
		b, _ := json.Marshal(got)
		return ok, string(b)
	})
	if n := fs.blockedBy(a.cmd.Process.Pid); n > 0 {
		t.Errorf("the agent sent %d requests to the hung file system; want none", n)
	}
	stopWithin(t, a)
}

// TestVolumeUsageAfterRestartIsSpread: after a restart, the first
// measurements of a node's volumes are spread over the period, not all
// made at start (no storm of walks).
func TestVolumeUsageAfterRestartIsSpread(t *testing.T) {
	a := newAgent(t)
	var vols strings.Builder
	for i := range 20 {
		fmt.Fprintf(&vols, "  - {name: v%02d, emptyDir: {}}\n", i)
	}
	a.writeManifest("pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: many}\nspec:\n  containers: [{name: c, image: busybox}]\n  volumes:\n"+vols.String())
	const period = 4 * time.Second
	a.start("--volume-stats-period=" + period.String())
	a.waitPod("default", "many", 10*time.Second, ready)
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	a.start(a.extra...)
	start := time.Now()
	first := map[string]time.Duration{}
	waitFor(t, 3*period, "a first measurement of every volume after the restart", func() (bool, string) {
		for name, u := range a.usageOf("default", "many") {
			if _, seen := first[name]; u != nil && !seen {
				first[name] = time.Since(start)
			}
		}
		return len(first) == 20, fmt.Sprint(first)
	})
	lo, hi := period, time.Duration(0)
	for _, d := range first {
		lo, hi = min(lo, d), max(hi, d)
	}
	if hi-lo < period/3 {
		t.Fatalf("the first measurements after a restart came within %v of each other (%v): not spread over the %v period", hi-lo, first, period)
	}
	figure(t, "spread of the first usage measurements of 20 volumes after a restart, period 4s", hi-lo)
}
