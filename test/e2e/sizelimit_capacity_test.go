package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const tenMiPod = `
apiVersion: v1
kind: Pod
metadata: {name: tenmi}
spec:
  containers:
  - {name: c, image: busybox}
  volumes:
  - {name: scratch, emptyDir: {sizeLimit: 10Mi}}
`

// TestEmptyDirSizeLimitIsItsCapacity: a disk emptyDir of sizeLimit 10Mi
// on a file system without quotas (the default root) has that sizeLimit
// as its capacity (/metrics and /v1/pods; not its file system's) and a
// volume_agent_volume_size_limit_bytes of 10485760, so that an alert on
// used/capacity fires as it does for a claim: with 12 MiB written, used
// passes capacity, and /v1/pods says sizeLimitExceeded as before.
func TestEmptyDirSizeLimitIsItsCapacity(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("pod.yaml", tenMiPod)
	a.start("--volume-stats-period=1s")
	p := a.waitPod("default", "tenmi", 20*time.Second, ready)
	labels := `{namespace="default",persistentvolumeclaim="",pod="tenmi",volume="scratch"}`
	waitFor(t, 15*time.Second, "a first measurement", func() (bool, string) {
		return a.sizeLimitOf("tenmi", "scratch").Usage != nil, "no usage yet"
	})
	if got := a.metric("volume_agent_volume_stats_capacity_bytes" + labels); got != 10<<20 {
		t.Errorf("capacity metric = %v, want the sizeLimit 10485760", got)
	}
	if got := a.metric("volume_agent_volume_size_limit_bytes" + labels); got != 10<<20 {
		t.Errorf("size limit metric = %v, want 10485760", got)
	}
	if u := a.usageOf("default", "tenmi")["scratch"]; u == nil || u.CapacityBytes != 10<<20 || u.AvailableBytes > 10<<20 {
		t.Errorf("/v1/pods usage = %+v; want capacity 10485760 and at most that available", u)
	}

	if err := os.WriteFile(filepath.Join(p.volume("scratch").Path, "twelve"), []byte(strings.Repeat("x", 12<<20)), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "sizeLimitExceeded", func() (bool, string) {
		s := a.sizeLimitOf("tenmi", "scratch")
		b, _ := json.Marshal(s)
		return s.Exceeded && s.Usage != nil && s.Usage.UsedBytes > 10<<20, string(b)
	})
	used, capacity := a.metric("volume_agent_volume_stats_used_bytes"+labels), a.metric("volume_agent_volume_stats_capacity_bytes"+labels)
	if used <= capacity || capacity != 10<<20 || a.metric("volume_agent_volume_stats_available_bytes"+labels) != 0 {
		t.Errorf("used %v, capacity %v; want used over the capacity 10485760, nothing available", used, capacity)
	}
	if u := a.usageOf("default", "tenmi")["scratch"]; u == nil || u.CapacityBytes != 10<<20 || u.UsedBytes <= u.CapacityBytes {
		t.Errorf("/v1/pods usage = %+v; want used over the capacity 10485760", u)
	}
	out := runCLI(t, "status", "--addr", a.addr)
	if !strings.Contains(out.stdout, "10Mi") || !strings.Contains(out.stdout, "exceeds the limit") {
		t.Errorf("volume-agent status:\n%s\nwant SIZE 10Mi and the warning", out.stdout)
	}
}
