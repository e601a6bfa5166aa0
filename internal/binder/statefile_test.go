package binder

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/reclaim"
)

func TestStateFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "claims.json")
	st := newStore(path)
	if rs, err := st.load(); err != nil || len(rs) != 0 {
		t.Fatalf("a missing file: %v, %v; want no bindings", rs, err)
	}
	want := records{
		"pv-a": {Namespace: "default", Name: "data", UID: "u1", PV: "pv-a", Phase: PhaseBound},
		"pv-b": {Namespace: "team", Name: "logs", PV: "pv-b", Phase: PhaseReleased,
			ReleasedAt: time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)},
	}
	if err := st.save(want); err != nil {
		t.Fatal(err)
	}
	got, err := newStore(path).load()
	if err != nil || !maps.Equal(got, want) {
		t.Fatalf("reloaded %v, %v; want %v", got, err, want)
	}
	data, _ := os.ReadFile(path)
	for _, s := range []string{`"version": 1`, `"namespace": "default"`, `"name": "data"`, `"uid": "u1"`, `"pv": "pv-a"`, `"phase": "Released"`} {
		if !strings.Contains(string(data), s) {
			t.Errorf("state file lacks %s:\n%s", s, data)
		}
	}
	assertNoTemps(t, filepath.Dir(path))
}

// A state file that exists but is not valid is refused with an error that
// names it and says how to recover: taking it for "no bindings" would let
// claims bind again to other PersistentVolumes.
func TestInvalidStateFileIsRefused(t *testing.T) {
	bound := `{"namespace": "default", "name": "data", "pv": "pv-a", "phase": "Bound"}`
	made := `{"podUID": "pu", "volume": "v", "nonce": "n1", "claim": {"metadata": {"namespace": "d", "name": "p-v", "uid": "` +
		string(madeUID("pu", "v", "n1")) + `"}}}`
	forged := `{"podUID": "pu", "volume": "v", "nonce": "n2", "claim": {"metadata": {"namespace": "d", "name": "p-v", "uid": "` +
		string(madeUID("pu", "v", "n1")) + `"}}}`
	snap := `{"namespace": "d", "name": "s", "uid": "s1", "handle": "snapshot-1", "provisioner": "local.volume-agent.io", "claim": "c",
		"pv": {"metadata": {"name": "p"}}, "step": "Ready", "size": "1Gi"}`
	tests := []struct {
		name, content, want string
	}{
		{"empty", "", "EOF"},
		{"truncated", `{"version": 1, "bindings": [` + bound, "unexpected EOF"},
		{"not JSON", "version=1\n", "invalid character"},
		{"trailing data", `{"version": 1}{}`, "trailing data"},
		{"no version", `{"bindings": []}`, "no version field"},
		{"another version", `{"version": 7, "bindings": []}`, "version 7 is not 1 to 6"},
		{"an ephemeral claim without its pod", `{"version": 5, "bindings": [], "ephemeralClaims": [{"volume": "v",
			"claim": {"metadata": {"namespace": "d", "name": "p-v", "uid": "u"}}}]}`, "lacks"},
		{"an ephemeral claim twice", `{"version": 5, "bindings": [], "ephemeralClaims": [` + made + `, ` + made + `]}`, "made twice"},
		{"an ephemeral claim whose uid is not its nonce's", `{"version": 5, "bindings": [], "ephemeralClaims": [` + forged + `]}`,
			"is not the one made for pod pu"},
		{"a provisioning without its request", `{"version": 4, "bindings": [{"namespace": "d", "name": "c", "pv": "p", "phase": "Provisioning"}]}`,
			`phase "Provisioning" with a provisioning false`},
		{"a provisioning without its class", `{"version": 4, "bindings": [{"namespace": "d", "name": "c", "pv": "p", "phase": "Provisioning",
			"provisioning": {"provisioner": "x", "claim": {"metadata": {"name": "c"}}}}]}`, "without its claim, class or provisioner"},
		{"unknown phase", `{"version": 1, "bindings": [{"namespace": "d", "name": "c", "pv": "p", "phase": "Lost"}]}`, `phase "Lost"`},
		{"no pv", `{"version": 1, "bindings": [{"namespace": "d", "name": "c", "phase": "Bound"}]}`, "lacks"},
		{"a PV twice", `{"version": 1, "bindings": [` + bound + `, ` + strings.Replace(bound, `"data"`, `"other"`, 1) + `]}`,
			`PersistentVolume "pv-a" is in two bindings`},
		{"a provisioned PV of another name", `{"version": 2, "bindings": [{"namespace": "d", "name": "c", "pv": "p", "phase": "Bound",
			"provisioned": {"metadata": {"name": "q"}}}]}`, `its provisioned PersistentVolume is named "q", not "p"`},
		{"an unknown reclaim step", `{"version": 3, "bindings": [{"namespace": "d", "name": "c", "pv": "p", "phase": "Released",
			"provisioned": {"metadata": {"name": "p"}, "spec": {"persistentVolumeReclaimPolicy": "Delete"}}, "reclaim": {"step": "Shredding"}}]}`,
			`unknown reclaim step "Shredding"`},
		{"a reclaim step on a Retain PV", `{"version": 3, "bindings": [{"namespace": "d", "name": "c", "pv": "p", "phase": "Released",
			"provisioned": {"metadata": {"name": "p"}, "spec": {"persistentVolumeReclaimPolicy": "Retain"}}, "reclaim": {"step": "Deleting"}}]}`,
			"a reclaim step on a record that is not"},
		{"a claim twice", `{"version": 1, "bindings": [` + bound + `, ` + strings.Replace(bound, `"pv-a"`, `"pv-b"`, 1) + `]}`,
			"claim default/data (uid \"\") is in two bindings"}, {"a snapshot without its claim", `{"version": 6, "bindings": [], "snapshots": [{"namespace": "d", "name": "s", "handle": "snapshot-1",
			"provisioner": "local.volume-agent.io", "pv": {"metadata": {"name": "p"}}, "step": "Ready", "size": "1Gi"}]}`, "snapshot 0 lacks"},
		{"a snapshot of an unknown step", `{"version": 6, "bindings": [], "snapshots": [` + strings.Replace(snap, `"Ready"`, `"Gone"`, 1) + `]}`,
			`step "Gone" is not Taking, Ready or Deleting`},
		{"a snapshot ready without its size", `{"version": 6, "bindings": [], "snapshots": [` + strings.Replace(snap, `"1Gi"`, `""`, 1) + `]}`,
			"Ready without its size"},
		{"a snapshot twice", `{"version": 6, "bindings": [], "snapshots": [` + snap + `, ` + snap + `]}`, `snapshot "snapshot-1" is in two records`},
		{"a VolumeSnapshot twice", `{"version": 6, "bindings": [], "snapshots": [` + snap + `, ` + strings.Replace(snap, `"snapshot-1"`, `"snapshot-2"`, 1) + `]}`,
			`VolumeSnapshot d/s (uid "s1") is in two records`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "claims.json")
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := New(Config{Inner: newFakeInner(), StatePath: path, NodeName: "node-1", Logger: zap.NewNop()})
			if err == nil {
				t.Fatal("New accepted an invalid state file")
			}
			for _, s := range []string{path, tt.want, "move it away"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

// A failed write leaves the old file and no temporary file.
func TestFailedWriteLeavesNoTemps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "claims.json")
	if err := os.Mkdir(path, 0o755); err != nil { // rename(2) cannot replace a non-empty directory
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(path, []byte("{}")); err == nil {
		t.Fatal("writing over a non-empty directory succeeded")
	}
	assertNoTemps(t, dir)
}

// New removes the temporary files a crash during a write left behind.
func TestNewRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, ".claims.json.tmp-123")
	if err := os.WriteFile(stale, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Inner: newFakeInner(), StatePath: filepath.Join(dir, "claims.json"), NodeName: "n", Logger: zap.NewNop()}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temporary file: %v", err)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "claims.json")
	inner, log := newFakeInner(), zap.NewNop()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no inner", Config{StatePath: path, NodeName: "n", Logger: log}, "Inner is required"},
		{"no state path", Config{Inner: inner, NodeName: "n", Logger: log}, "StatePath is required"},
		{"no node name", Config{Inner: inner, StatePath: path, Logger: log}, "NodeName is required"},
		{"no logger", Config{Inner: inner, StatePath: path, NodeName: "n"}, "Logger is required"},
		{"missing directory", Config{Inner: inner, StatePath: filepath.Join(dir, "nope", "claims.json"), NodeName: "n", Logger: log}, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}

// A record's provisioned PersistentVolume is kept whole, and makes the file
// version 2, which an agent from before provisioning refuses.
func TestStateFileKeepsProvisionedPVs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "claims.json")
	claim := newClaim("data", "1Gi", claimUID("u1"), claimClass("fast"))
	want := records{"pvc-u1": {Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: PhaseBound,
		Provisioned: provisionedPV(claim, newClass("fast"))}}
	if err := newStore(path).save(want); err != nil {
		t.Fatal(err)
	}
	got, err := newStore(path).load()
	if err != nil || !equalRecords(got, want) {
		t.Fatalf("reloaded %v, %v; want %v", got, err, want)
	}
	if data, _ := os.ReadFile(path); !strings.Contains(string(data), `"version": 2`) {
		t.Errorf("state file with a provisioned PV is not version 2:\n%s", data)
	}
	if err := newStore(path).save(records{}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); !strings.Contains(string(data), `"version": 1`) {
		t.Errorf("state file without a provisioned PV is not version 1:\n%s", data)
	}
}

// A record with a reclaim step is written as version 3, which an agent
// from before deferred deletion refuses instead of forgetting the storage
// set aside.
func TestReclaimStepIsWrittenAsVersion3(t *testing.T) {
	claim := newClaim("data", "1Gi", claimUID("u1"), claimClass("fast"))
	r := record{Namespace: "default", Name: "data", UID: "u1", PV: "pvc-u1", Phase: PhaseReleased, Provisioned: provisionedPV(claim, newClass("fast")),
		Reclaim: reclaim.State{Step: reclaim.Aside, DeleteAfter: time.Date(2026, 11, 26, 8, 10, 0, 0, time.UTC)}}
	path := filepath.Join(t.TempDir(), "claims.json")
	if err := newStore(path).save(records{r.PV: r}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if !strings.Contains(string(data), `"version": 3`) || !strings.Contains(string(data), `"step": "Aside"`) {
		t.Errorf("state file:\n%s\nwant version 3 with the step", data)
	}
	got, err := newStore(path).load()
	if err != nil || !equalRecords(got, records{r.PV: r}) {
		t.Errorf("reloaded %v, %v", got, err)
	}
}

// Made claims are written as version 5, which an agent from before
// ephemeral volumes refuses instead of forgetting them, and read back.
func TestMadeClaimsAreWrittenAsVersion5(t *testing.T) {
	pod, made := madeForWeb(t)
	c := made["default/web-scratch"].Claim
	path := filepath.Join(t.TempDir(), "claims.json")
	if err := newStore(path).saveState(records{}, made, nil); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); !strings.Contains(string(data), `"version": 5`) {
		t.Errorf("state file:\n%s\nwant version 5", data)
	}
	_, got, err := newStore(path).loadState()
	if err != nil || len(got) != 1 || got["default/web-scratch"].Claim.UID != c.UID || !metav1.IsControlledBy(got["default/web-scratch"].Claim, pod) {
		t.Errorf("reloaded %v, %v", got, err)
	}
}

// A missing state file is "no bindings" only when nothing on disk shows
// that claims were bound before; otherwise New refuses, naming what it
// found and how to start from scratch knowingly.
func TestMissingStateFileWithTracesIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		traces func() ([]string, error)
		want   string
	}{
		{"no traces", func() ([]string, error) { return nil, nil }, ""},
		{"a claim's volume on disk", func() ([]string, error) { return []string{"/root/pods/u/volumes/kubernetes.io~local-volume/pv-1"}, nil },
			"is missing, but claims were bound before (/root/pods/u/volumes/kubernetes.io~local-volume/pv-1)"},
		{"the disk cannot be read", func() ([]string, error) { return nil, errors.New("EIO") }, "cannot be told: EIO"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Config{Inner: newFakeInner(), StatePath: statePath(t), NodeName: "node-1", Logger: zap.NewNop(), Traces: tc.traces})
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	path := statePath(t)
	if err := os.WriteFile(path, []byte(`{"version": 1, "bindings": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	traces := func() ([]string, error) { t.Fatal("traces looked at while the state file is there"); return nil, nil }
	if _, err := New(Config{Inner: newFakeInner(), StatePath: path, NodeName: "node-1", Logger: zap.NewNop(), Traces: traces}); err != nil {
		t.Fatalf("New with the state file there: %v", err)
	}
}

// Snapshot records are written with version 6, which an agent from
// before snapshots refuses rather than forget them, and read back as
// written.
func TestStateFileSnapshotsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "claims.json")
	snaps := snapRecords{"snapshot-1": {Namespace: "d", Name: "s", UID: "s1", Handle: "snapshot-1", Provisioner: "local.volume-agent.io",
		Claim: "c", ClaimUID: "u1", PV: newPV("p", "1Gi"), Step: snapTaking}}
	if err := newStore(path).saveState(records{}, nil, snaps); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); !strings.Contains(string(data), `"version": 6`) {
		t.Errorf("state file %s, want version 6", data)
	}
	_, _, got, err := newStore(path).loadAll()
	if r := got["snapshot-1"]; err != nil || len(got) != 1 || r.Step != snapTaking || r.ClaimUID != "u1" || r.PV.Name != "p" {
		t.Errorf("read back %+v, %v", got, err)
	}
}
