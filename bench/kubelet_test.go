package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestKubeletSetUps reads set-ups from a kubelet log as v1.36 writes it at
// --v=1: the latest time of each pod's volumes, each volume counted once.
func TestKubeletSetUps(t *testing.T) {
	const uid = "632134df-c339-470c-abbc-cd9556d2004c"
	lines := `I1126 15:45:12.100000   33 reconciler_common.go:251] "operationExecutor.VerifyControllerAttachedVolume started for volume \"config\" (UniqueName: \"kubernetes.io/configmap/` + uid + `-config\") pod \"k1-1\" (UID: \"` + uid + `\") " pod="bench/k1-1"
I1126 15:45:12.200001   33 operation_generator.go:617] "MountVolume.SetUp succeeded for volume \"config\" (UniqueName: \"kubernetes.io/configmap/` + uid + `-config\") pod \"k1-1\" (UID: \"` + uid + `\") " pod="bench/k1-1"
I1126 15:45:12.300002   33 operation_generator.go:617] "MountVolume.SetUp succeeded for volume \"host\" (UniqueName: \"kubernetes.io/host-path/` + uid + `-host\") pod \"k1-1\" (UID: \"` + uid + `\") " pod="bench/k1-1"
I1126 15:45:12.900000   33 operation_generator.go:617] "MountVolume.SetUp succeeded for volume \"other\" (UniqueName: \"kubernetes.io/empty-dir/11111111-c339-470c-abbc-cd9556d2004c-other\") pod \"x\" (UID: \"11111111-c339-470c-abbc-cd9556d2004c\") " pod="bench/x"
I1126 15:45:12.950000   33 operation_generator.go:617] "MountVolume.SetUp succeeded for volume \"host\" (UniqueName: \"kubernetes.io/host-path/` + uid + `-host\") pod \"k1-1\" (UID: \"` + uid + `\") " pod="bench/k1-1"
I1126 15:45:12.400003   33 operation_generator.go:617] "MountVolume.SetUp succeeded for volume \"kube-api-access-x7k2p\" (UniqueName: \"kubernetes.io/projected/` + uid + `-kube-api-access-x7k2p\") pod \"k1-1\" (UID: \"` + uid + `\") " pod="bench/k1-1"
`
	log := filepath.Join(t.TempDir(), "kubelet.log")
	if err := os.WriteFile(log, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	r := newRunner(t.Logf)
	defer r.close()
	k := &sideBySide{r: r, kubeletLog: log}
	got := k.waitKubeletSetUps(0, []string{uid}, 3)[uid]
	if got.Format("01-02 15:04:05.000000") != "11-26 15:45:12.400003" || got.Year() != time.Now().Year() {
		t.Errorf("latest set-up %v, want 11-26 15:45:12.400003 of this year", got)
	}
}

// TestCPUDelta counts a process that ended in the window once: through
// the process that waited for it, less what it had used before.
func TestCPUDelta(t *testing.T) {
	before := map[procKey]procCPU{
		{1, 1}: {"shims+runc+containers", 1 * time.Second}, // the node's init
		{2, 2}: {"shims+runc+containers", 3 * time.Second}, // a shim that ends
		{3, 3}: {"agent", 2 * time.Second},
	}
	after := map[procKey]procCPU{
		{1, 1}: {"shims+runc+containers", 1*time.Second + 3500*time.Millisecond}, // reaped the shim: 3.5 s
		{3, 3}: {"agent", 2500 * time.Millisecond},
		{4, 4}: {"agent", 100 * time.Millisecond}, // started in the window
	}
	use := cpuDelta(before, after)
	if d := use["shims+runc+containers"]; d < 0.499 || d > 0.501 {
		t.Errorf("shims: %v s, want 0.5", d)
	}
	if d := use["agent"]; d < 0.599 || d > 0.601 {
		t.Errorf("agent: %v s, want 0.6", d)
	}
}

// TestMergeAlternate: a row of -alternate takes the kubelet's figures from
// the kubelet's burst, the agent's from the agent's, and their ratios.
func TestMergeAlternate(t *testing.T) {
	ms := time.Millisecond
	kr := kubeletRound{Round: 1, Mix: "m", Kubelet: summarize([]time.Duration{600 * ms}), kubeletLat: []time.Duration{600 * ms},
		KubeletDown: summarize([]time.Duration{2000 * ms}), SetupWindowS: 0.7, SetupCPU: cpuUse{"kubelet": 0.2}}
	ar := kubeletRound{Round: 1, Mix: "m", Agent: summarize([]time.Duration{200 * ms}), agentLat: []time.Duration{200 * ms},
		AgentDown: summarize([]time.Duration{100 * ms}), SetupWindowS: 0.25, SetupCPU: cpuUse{"agent": 0.05}, TeardownWindow: 0.15}
	rr := mergeAlternate(kr, ar)
	if !rr.Alternate || rr.Agent.P50 != 200 || rr.Kubelet.P50 != 600 || rr.RatioP50 != 3 || rr.DownRatioP50 != 20 {
		t.Errorf("merged %+v: want agent 200 ms, kubelet 600 ms, ratios 3 and 20", rr)
	}
	if rr.SetupWindowS != 0.7 || rr.AgentSetupWindowS != 0.25 || rr.AgentTeardownWindow != 0.15 || rr.AgentSetupCPU["agent"] != 0.05 || rr.SetupCPU["kubelet"] != 0.2 {
		t.Errorf("merged windows and CPU %+v: each burst's own", rr)
	}
	if len(rr.agentLat) != 1 || len(rr.kubeletLat) != 1 {
		t.Errorf("merged latencies %v, %v: want one of each", rr.agentLat, rr.kubeletLat)
	}
}
