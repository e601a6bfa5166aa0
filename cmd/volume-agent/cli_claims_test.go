package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// claimsAnswer is a GET /v1/claims answer with a claim of each kind.
const claimsAnswer = `{"claims": [
 {"namespace": "default", "name": "web", "phase": "Bound", "pv": "pvc-1", "capacity": "5Gi", "reclaimPolicy": "Delete"},
 {"namespace": "default", "name": "logs", "phase": "Pending",
  "error": "no PersistentVolume fits claim default/logs (2 checked: pv-a: too small (1Gi < 5Gi), pv-b: class \"fast\" ≠ \"\"); and more words to pass eighty characters"},
 {"namespace": "default", "name": "old", "phase": "Released", "pv": "pvc-2", "reclaimPolicy": "Delete",
  "pendingDeletion": {"step": "Aside", "deleteAfter": "2026-11-26T08:10:00Z"}},
 {"namespace": "default", "name": "gone", "phase": "Bound", "pv": "pvc-3", "reclaimPolicy": "Delete",
  "error": "removed from the manifests but not released: a pod that is not terminated still names it"}
]}`

func TestClaimsTable(t *testing.T) {
	addr := serve(t, "/v1/claims", http.StatusOK, []byte(claimsAnswer))
	now := time.Date(2026, 11, 26, 8, 0, 30, 0, time.UTC)
	out := runCmd(now, "claims", "--addr", addr)
	if out.code != exitOK || out.stderr != "" {
		t.Fatalf("exit %d, stderr %q", out.code, out.stderr)
	}
	lines := strings.Split(strings.TrimSpace(out.stdout), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines, want a header and 4 claims:\n%s", len(lines), out.stdout)
	}
	for i, want := range [][]string{
		{"CLAIM", "PHASE", "PV", "CAPACITY", "SOURCE", "RECLAIM", "DELETION", "DELETE-AFTER", "REASON"},
		{"default/gone", "Bound", "pvc-3", "Delete", "-", "-", "removed from the manifests"},
		{"default/logs", "Pending", "-", "-", "-", "-", "no PersistentVolume fits", "..."},
		{"default/old", "Released", "pvc-2", "Delete", "Aside", "2026-11-26T08:10:00Z (in 9m30s)"},
		{"default/web", "Bound", "pvc-1", "5Gi", "Delete"},
	} {
		for _, s := range want {
			if !strings.Contains(lines[i], s) {
				t.Errorf("line %d %q lacks %q", i, lines[i], s)
			}
		}
	}
	wide := runCmd(now, "claims", "--addr", addr, "-o", "wide")
	if !strings.Contains(wide.stdout, "and more words to pass eighty characters") {
		t.Errorf("-o wide cut a reason:\n%s", wide.stdout)
	}
	if js := runCmd(now, "claims", "--addr", addr, "-o", "json"); js.stdout != claimsAnswer {
		t.Errorf("-o json changed the answer")
	}
}

// snapshotsAnswer is a GET /v1/claims answer with a restore, a clone and
// VolumeSnapshots: ready, waiting, removed and being deleted.
const snapshotsAnswer = `{"claims": [
 {"namespace": "default", "name": "copy", "phase": "Bound", "pv": "pvc-4", "capacity": "1Gi", "reclaimPolicy": "Delete",
  "dataSource": "PersistentVolumeClaim web"},
 {"namespace": "default", "name": "restored", "phase": "Pending", "dataSource": "VolumeSnapshot later",
  "error": "waiting for VolumeSnapshot default/later, its data source, to be ready to use"}
], "snapshots": [
 {"namespace": "default", "name": "later", "claim": "logs", "readyToUse": false,
  "error": "waiting for claim default/logs to be bound (a claim is provisioned once a pod uses it)"},
 {"namespace": "default", "name": "nightly", "claim": "web", "pv": "pvc-1", "snapshot": "snapshot-1", "readyToUse": true,
  "restoreSize": "5Gi", "creationTime": "2026-11-26T07:00:30Z"},
 {"namespace": "default", "name": "old", "claim": "web", "pv": "pvc-1", "snapshot": "snapshot-0", "readyToUse": true,
  "restoreSize": "5Gi", "creationTime": "2026-11-25T08:00:30Z", "removed": true, "deleteAfter": "2026-11-26T08:10:00Z"},
 {"namespace": "default", "name": "older", "claim": "web", "pv": "pvc-1", "snapshot": "snapshot-00", "readyToUse": true,
  "restoreSize": "5Gi", "creationTime": "2026-11-24T08:00:30Z", "removed": true, "deleting": true}
]}`

// A clone's and a restore's source are shown with their claims, and the
// VolumeSnapshots below them: whether ready, their size and age, when a
// removed one is deleted, and what one waits for.
func TestClaimsTableWithSnapshots(t *testing.T) {
	addr := serve(t, "/v1/claims", http.StatusOK, []byte(snapshotsAnswer))
	now := time.Date(2026, 11, 26, 8, 0, 30, 0, time.UTC)
	out := runCmd(now, "claims", "--addr", addr)
	if out.code != exitOK || out.stderr != "" {
		t.Fatalf("exit %d, stderr %q", out.code, out.stderr)
	}
	lines := strings.Split(strings.TrimSpace(out.stdout), "\n")
	if len(lines) != 9 || lines[3] != "" {
		t.Fatalf("%d lines, want 2 claims, a blank line and 4 snapshots, each table with its header:\n%s", len(lines), out.stdout)
	}
	for i, want := range [][]string{
		1: {"default/copy", "Bound", "pvc-4", "1Gi", "PersistentVolumeClaim/web", "Delete"},
		2: {"default/restored", "Pending", "VolumeSnapshot/later", "waiting for VolumeSnapshot default/later"},
		4: {"SNAPSHOT", "CLAIM", "READY", "RESTORE-SIZE", "AGE", "DELETION", "REASON"},
		5: {"default/later", "logs", "false", "-", "waiting for claim default/logs"},
		6: {"default/nightly", "web", "true", "5Gi", "60m", "-"},
		7: {"default/old", "web", "true", "5Gi", "24h", "2026-11-26T08:10:00Z (in 9m30s)"},
		8: {"default/older", "web", "true", "Deleting"},
	} {
		for _, s := range want {
			if !strings.Contains(lines[i], s) {
				t.Errorf("line %d %q lacks %q", i, lines[i], s)
			}
		}
	}
	if js := runCmd(now, "claims", "--addr", addr, "-o", "json"); js.stdout != snapshotsAnswer {
		t.Errorf("-o json changed the answer")
	}
}

func TestClaimsErrors(t *testing.T) {
	if out := runCmd(time.Now(), "claims", "--addr", "127.0.0.1:1"); out.code != exitUnreachable || !strings.Contains(out.stderr, "cannot reach the agent") {
		t.Errorf("unreachable: %+v", out)
	}
	if out := runCmd(time.Now(), "claims", "-o", "yaml"); out.code != exitUsage {
		t.Errorf("-o yaml: %+v", out)
	}
	addr := serve(t, "/v1/claims", http.StatusOK, []byte(`{"claims": []}`))
	if out := runCmd(time.Now(), "claims", "--addr", addr); out.code != exitOK || !strings.Contains(out.stderr, "No claims") {
		t.Errorf("no claims: %+v", out)
	}
}

func TestAPIClientAddresses(t *testing.T) {
	for _, tc := range []struct{ addr, base, at, wantErr string }{
		{addr: "127.0.0.1:9810", base: "http://127.0.0.1:9810", at: "http://127.0.0.1:9810"},
		{addr: "http://127.0.0.1:9810/", base: "http://127.0.0.1:9810", at: "http://127.0.0.1:9810"},
		{addr: "unix:///run/volume-agent/status.sock", base: "http://localhost", at: "unix:///run/volume-agent/status.sock"},
		{addr: "unix://run/status.sock", wantErr: "want host:port or unix:///path"},
		{addr: "https://127.0.0.1:9810", wantErr: "want host:port or unix:///path"},
	} {
		c, err := newAPIClient(tc.addr)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("newAPIClient(%q) = %v; want an error with %q", tc.addr, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || c.base != tc.base || c.at != tc.at):
			t.Errorf("newAPIClient(%q) = %q at %q, %v; want %q at %q", tc.addr, c.base, c.at, err, tc.base, tc.at)
		}
	}
}

func TestClaimsThroughUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "cli-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"claims": []}`))
	}))
	ts.Listener = ln
	ts.Start()
	defer ts.Close()
	var stdout, stderr bytes.Buffer
	env := cmdEnv{stdout: &stdout, stderr: &stderr, now: time.Now}
	if code := runClaims(env, []string{"--addr", "unix://" + path}); code != exitOK {
		t.Fatalf("claims through a unix socket: exit %d, %s", code, stderr.String())
	}
}
