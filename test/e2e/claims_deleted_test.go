package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClaimDeletedWhilePodRuns: a claim removed from the manifests while
// its pod runs is not released (a pod that is not terminated still names
// it), and the pod's volume shows just that: one row, under the pod's name
// for it, Mounted and ready, the words of volume-agent claims as its
// reason, its usage still measured (/v1/pods and /metrics), no second row
// "not in the pod's spec"; the volume is neither torn down nor remounted,
// and its data stays, across a restart too. Once the pod goes, the claim is released, as before.
func TestClaimDeletedWhilePodRuns(t *testing.T) {
	a := newAgent(t)
	store := disk(t, "store")
	a.writeManifest("pv.yaml", fmt.Sprintf(localPV, "pv-a", "1Gi", store))
	a.writeManifest("claim.yaml", dataClaim)
	a.writeManifest("pod.yaml", fmt.Sprintf(claimPod, "db"))
	a.start("--volume-stats-period=1s")
	p := a.waitPod("default", "db", 10*time.Second, ready)
	path := p.volume("store").Path
	if err := os.WriteFile(filepath.Join(path, "written-by-pod"), []byte("db data"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "a first measurement", func() (bool, string) {
		u := a.usageOf("default", "db")["store"]
		return u != nil && u.UsedBytes > 0, fmt.Sprint(u)
	})
	mounts := mountIDsUnder(t, a.resolvedRoot())

	a.removeManifest("claim.yaml")
	held := "removed from the manifests but not released: a pod that is not terminated still names it"
	waitFor(t, 10*time.Second, "the claim held by its pod", func() (bool, string) {
		c := claimOf(a.claims(), "data")
		return c.Phase == "Bound" && c.Error == held, fmt.Sprintf("%+v", a.claims())
	})
	claimWords := claimOf(a.claims(), "data").Error
	want := "claim default/data " + claimWords
	p = a.waitPod("default", "db", 10*time.Second, func(p apiPod) bool { return strings.HasPrefix(p.volume("store").Error, want) })
	v := p.volume("store")
	if len(p.Volumes) != 1 || !p.Ready || v.State != "Mounted" || v.Path != path || v.PV != "pv-a" || v.Claim != "data" ||
		v.Plugin != "kubernetes.io/local-volume" {
		t.Fatalf("pod db = %+v; want its one volume store Mounted at %s, ready, saying %q", p, path, want)
	}
	if u := a.usageOf("default", "db")["store"]; u == nil || u.UsedBytes == 0 {
		t.Errorf("usage of store = %+v; want it still measured", u)
	}
	if got := a.claimUsedBytes("data"); got <= 0 {
		t.Errorf("volume_agent_volume_stats_used_bytes of claim data = %v; want it still exported", got)
	}
	for _, args := range [][]string{{"status", "--addr", a.addr}, {"status", "--addr", a.addr, "-o", "wide"}} {
		out := runCLI(t, args...)
		if out.code != 0 || strings.Contains(out.stdout, "not in the pod's spec") || strings.Contains(out.stdout, "Failed") ||
			strings.Count(out.stdout, "default/db") != 1 || !strings.Contains(out.stdout, "store") {
			t.Errorf("volume-agent %v:\n%s\nwant one row for store, Mounted", args, out.stdout)
		}
		if len(args) == 5 && !strings.Contains(out.stdout, want) {
			t.Errorf("volume-agent status -o wide:\n%s\nwant %q", out.stdout, want)
		}
		if under := reasonsUnder(out.stdout)["default/db store"]; len(args) == 3 && under != v.Error {
			t.Errorf("volume-agent status:\n%s\nwant under the row of store %q", out.stdout, v.Error)
		}
	}
	if after := mountIDsUnder(t, a.resolvedRoot()); after != mounts {
		t.Errorf("the volume was remounted: %s -> %s", mounts, after)
	}
	checkFile(t, filepath.Join(path, "written-by-pod"), "db data")

	// A restart finds it as it was: the same one row, its usage measured
	// again, nothing remounted.
	a.restart(false)
	p = a.waitPod("default", "db", 10*time.Second, func(p apiPod) bool {
		v := p.volume("store")
		return len(p.Volumes) == 1 && p.Ready && v.State == "Mounted" && strings.HasPrefix(v.Error, want)
	})
	waitFor(t, 15*time.Second, "the volume measured after the restart", func() (bool, string) {
		u := a.usageOf("default", "db")["store"]
		return u != nil && u.UsedBytes > 0, fmt.Sprint(u)
	})
	if after := mountIDsUnder(t, a.resolvedRoot()); after != mounts {
		t.Errorf("the restart remounted the volume: %s -> %s", mounts, after)
	}
	checkFile(t, filepath.Join(path, "written-by-pod"), "db data")

	// The pod goes: torn down, and the claim released with its data.
	a.removeManifest("pod.yaml")
	a.waitPodDirGone(p.UID)
	waitFor(t, 10*time.Second, "the claim's PV Released", func() (bool, string) {
		c := claimOf(a.claims(), "data")
		return c.Phase == "Released" && c.PV == "pv-a", fmt.Sprintf("%+v", a.claims())
	})
	checkFile(t, filepath.Join(store, "written-by-pod"), "db data")
}

// claimUsedBytes is volume_agent_volume_stats_used_bytes of claim name
// of namespace default, or -1 when /metrics has none.
func (a *agent) claimUsedBytes(name string) float64 {
	a.t.Helper()
	_, body := a.get("/metrics")
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "volume_agent_volume_stats_used_bytes{") && strings.Contains(line, `persistentvolumeclaim="`+name+`"`) {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v); err == nil {
				return v
			}
		}
	}
	return -1
}
