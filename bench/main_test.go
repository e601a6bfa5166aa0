package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets the test binary be the mount-namespace child too, as the
// bench program is (see childFlag).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == childFlag {
		err := runChild(os.Args[2:])
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// TestTinyRun runs the whole suite at a tiny size in both modes: it proves
// the suite runs and reports every figure, never how fast anything is.
func TestTinyRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the benchmarks need root: the agent mounts tmpfs")
	}
	o, err := parseFlags([]string{"-size", "tiny", "-out", filepath.Join(t.TempDir(), "bench.json")})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep, err := run(o, &out, t.Logf)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	b, err := os.ReadFile(o.out)
	if err != nil {
		t.Fatal(err)
	}
	var written report
	if err := json.Unmarshal(b, &written); err != nil {
		t.Fatalf("%s: %v", o.out, err)
	}
	if written.Commit == "" || written.Machine.Cores == 0 || written.Machine.Kernel == "" {
		t.Errorf("report lacks the machine or the commit: %+v", written.Machine)
	}
	counts := map[string]int{}
	for _, f := range written.Figures {
		counts[f.Mode]++
		if f.Dist != nil && (f.Dist.N == 0 || f.Dist.P50 <= 0) {
			t.Errorf("%s %q: empty distribution %+v", f.Mode, f.Name, *f.Dist)
		}
		if strings.HasSuffix(f.Name, "mounts made + removed") && *f.Value != 0 {
			t.Errorf("%s %q = %v; a restart must neither mount nor unmount", f.Mode, f.Name, *f.Value)
		}
	}
	// Each mode has its own figures; manifest mode adds idle and mount-table ones.
	if counts["manifest"] < 18 || counts["cluster"] < 14 {
		t.Errorf("figures per mode = %v; want every scenario of both modes", counts)
	}
	var table bytes.Buffer
	rep.table(&table)
	if !strings.Contains(table.String(), "burst of 4 pods") {
		t.Errorf("table lacks the burst figure:\n%s", table.String())
	}
}

// TestTinyUsageRun runs the usage scenario at a tiny size: every burst and
// the count of walks during them are reported.
func TestTinyUsageRun(t *testing.T) {
	rep := runTiny(t, "-modes", "manifest", "-scenario", "usage", "-agent-args", "--volume-stats-period=1s")
	bursts, walked := 0, false
	for _, f := range rep.Figures {
		switch {
		case f.Dist != nil && strings.Contains(f.Name, "emptyDirs of"):
			if f.Dist.N == 0 {
				t.Errorf("%q: empty distribution", f.Name)
			}
			bursts++
		case f.Value != nil && strings.HasPrefix(f.Name, "resident emptyDirs measured"):
			walked = true
		}
	}
	if want := tinySize.usageBursts + 1; bursts != want || !walked {
		t.Errorf("%d burst figures (want %d), walks figure %v; figures: %+v", bursts, want, walked, rep.Figures)
	}
}

// TestTinyBurstsRun runs the bursts scenario at a tiny size: memory at
// rest (with its anonymous part), each round's burst and removal with the
// agent's CPU per pod, the decay after each burst (12 intervals), the
// file-system floor and the agent's CPU beyond it.
func TestTinyBurstsRun(t *testing.T) {
	rep := runTiny(t, "-modes", "manifest", "-scenario", "bursts", "-rounds", "2")
	counts := map[string]int{}
	for _, f := range rep.Figures {
		switch {
		case f.Idle != nil && f.Idle.RSSMiB > 0:
			counts["idle"]++
		case f.Dist != nil && f.Dist.N == 4 && strings.HasPrefix(f.Name, "burst of 4"):
			counts["burst"]++
		case f.Dist != nil && f.Dist.N == 4 && strings.HasPrefix(f.Name, "4 pods removed"):
			counts["removed"]++
		case strings.HasPrefix(f.Name, "floor:"):
			counts["floor"]++
		case f.Value != nil && *f.Value > 0 && strings.HasPrefix(f.Name, "agent: CPU per pod set up (4 at once)"):
			counts["agent CPU set up"]++ // each round, and their mean
		case f.Value != nil && *f.Value > 0 && strings.HasPrefix(f.Name, "agent: CPU per pod torn down (4 at once)"):
			counts["agent CPU torn down"]++
		case f.Value != nil && strings.HasPrefix(f.Name, "agent − floor: CPU per pod"):
			counts["over floor"]++
		case f.Decay != nil && len(f.Decay.Millicores) == 12 && len(f.Decay.WakeupsPerSec) == 12:
			counts["decay"]++
		}
		if f.Idle != nil && (f.Idle.RSSAnonMiB <= 0 || f.Idle.RSSAnonMiB >= f.Idle.RSSMiB) {
			t.Errorf("%q: anonymous RSS %.1f MiB of %.1f: want a part of it", f.Name, f.Idle.RSSAnonMiB, f.Idle.RSSMiB)
		}
	}
	want := map[string]int{"idle": 3, "burst": 2, "removed": 2, "floor": 4,
		"agent CPU set up": 3, "agent CPU torn down": 3, "over floor": 2, "decay": 2}
	if !maps.Equal(counts, want) {
		t.Errorf("figures %v, want %v; figures: %+v", counts, want, rep.Figures)
	}
}

func TestParseFlagsScenario(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want string
		ok   bool
	}{{"", "suite", true}, {"usage", "usage", true}, {"bursts", "bursts", true}, {"kubelet", "kubelet", true}, {"burst", "", false}} {
		args := []string{}
		if tc.arg != "" {
			args = []string{"-scenario", tc.arg}
		}
		o, err := parseFlags(args)
		if (err == nil) != tc.ok || (tc.ok && o.scenario != tc.want) {
			t.Errorf("-scenario %q: scenario %q, error %v", tc.arg, o.scenario, err)
		}
	}
}

// TestPrivateManifestDir: the manifest directory's parent holds nothing
// else, so that the agent's watch of the parent sees only its own
// directory's events (not every file of the shared temporary directory).
func TestPrivateManifestDir(t *testing.T) {
	r := newRunner(t.Logf)
	dir := privateManifestDir(r)
	parent := filepath.Dir(dir)
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "manifests" || parent == filepath.Clean(os.TempDir()) {
		t.Errorf("manifest directory %s: parent %s holds %v, want only the manifest directory", dir, parent, entries)
	}
	r.close()
	if _, err := os.Stat(parent); !os.IsNotExist(err) {
		t.Errorf("parent %s left after close: %v", parent, err)
	}
}

// TestTinyClusterBurstsRun runs the bursts scenario in cluster mode at a
// tiny size: after each burst the decay, and the API server's requests by
// kind, among them the benchmark's own creates of the burst's pods.
func TestTinyClusterBurstsRun(t *testing.T) {
	rep := runTiny(t, "-modes", "cluster", "-scenario", "bursts", "-rounds", "1")
	var decays, requests int
	for _, f := range rep.Figures {
		switch {
		case f.Decay != nil:
			decays++
		case strings.HasPrefix(f.Name, "API requests, from before the burst"):
			requests++
			if f.Requests["POST pods"] != 4 {
				t.Errorf("%q: %v, want the 4 pods created (POST pods 4)", f.Name, f.Requests)
			}
		case strings.HasPrefix(f.Name, "API requests, from"):
			requests++
		}
	}
	if decays != 1 || requests != 2 {
		t.Errorf("%d decay and %d request figures, want 1 and 2; figures: %+v", decays, requests, rep.Figures)
	}
}

// TestParseFlagsRefuses: a flag for one scenario is refused with another,
// saying what it needs.
func TestParseFlagsRefuses(t *testing.T) {
	for _, args := range [][]string{
		{"-syscalls"},
		{"-scenario", "kubelet", "-syscalls"},
		{"-alternate"},
		{"-scenario", "bursts", "-alternate"},
		{"-scenario", "kubelet", "-alternate", "-without-kubelet"},
		{"-scenario", "kubelet", "-mixes", "cm-secret-emptydir,hostpath"},
		{"-scenario", "bursts", "-mixes", "cm-secret-emptydir"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	for _, args := range [][]string{{"-scenario", "kubelet", "-alternate"}, {"-scenario", "bursts", "-syscalls"}} {
		if _, err := parseFlags(args); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// TestParseFlagsMixes: -mixes keeps the named mixes, in the table's order
// whatever the order named; none named is every mix.
func TestParseFlagsMixes(t *testing.T) {
	o, err := parseFlags([]string{"-scenario", "kubelet", "-mixes", "cm-secret-emptydir,cm-secret-emptydir-hostpath"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.mixes) != 2 || !o.mixes[0].hostPath || o.mixes[0].token || o.mixes[1].hostPath || o.mixes[1].token {
		t.Errorf("-mixes cm-secret-emptydir,cm-secret-emptydir-hostpath = %+v", o.mixes)
	}
	o, err = parseFlags([]string{"-scenario", "kubelet"})
	if err != nil || len(o.mixes) != len(kubeletMixes) {
		t.Errorf("no -mixes: %d mixes, error %v; want all %d", len(o.mixes), err, len(kubeletMixes))
	}
}

// runTiny runs the benchmark at a tiny size with args, as root (it skips
// otherwise), its JSON written to a temporary directory, and returns the
// report.
func runTiny(t *testing.T, args ...string) *report {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the benchmarks need root: the agent mounts tmpfs")
	}
	o, err := parseFlags(append([]string{"-size", "tiny", "-out", filepath.Join(t.TempDir(), "bench.json")}, args...))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := run(o, io.Discard, t.Logf)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return rep
}
