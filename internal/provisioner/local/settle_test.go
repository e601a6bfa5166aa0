package local

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/volume-agent/volume-agent/internal/provisioner"
)

// TestTentativeRecords: a Tentative Provision records the volume before
// making it; Commit removes the record and keeps the volume; Abandon
// removes both; Unsettled lists what is left, as the PV Provision would
// have described, and leaves a record that does not add up alone.
func TestTentativeRecords(t *testing.T) {
	root := t.TempDir()
	p, f := newEnforcing(t, root)
	records := filepath.Join(root, RecordsDir)
	kept, dropped, plain := enforcing("kept"), enforcing("dropped"), request("plain", "")
	for _, req := range []*provisioner.Request{&kept, &dropped, &plain} {
		req.Tentative = true
		provision(t, p, *req)
	}
	if got := entries(t, records); !slices.Equal(got, []string{"pvc-uid-dropped.json", "pvc-uid-kept.json", "pvc-uid-plain.json"}) {
		t.Fatalf("records: %v", got)
	}
	left, err := p.Unsettled(t.Context())
	if err != nil || len(left) != 3 {
		t.Fatalf("Unsettled = %v, %v", left, err)
	}
	byPV := map[string]provisioner.Unsettled{}
	for _, u := range left {
		byPV[u.PV.Name] = u
	}
	d := byPV["pvc-uid-dropped"]
	if d.Claim.Name != "dropped" || d.Claim.UID != "uid-dropped" || d.PV.Annotations[AnnCapacity] != "fake" ||
		d.PV.Spec.Local.Path != filepath.Join(root, "ns-dropped-pvc-uid-dropped") {
		t.Errorf("unsettled %+v %+v", d.PV, d.Claim)
	}
	if pl := byPV["pvc-uid-plain"]; pl.PV.Annotations[AnnCapacity] != "" {
		t.Errorf("a plain directory's PV says %s %q", AnnCapacity, pl.PV.Annotations[AnnCapacity])
	}

	if err := p.Commit(t.Context(), byPV["pvc-uid-kept"].PV); err != nil {
		t.Fatal(err)
	}
	for _, pv := range []string{"pvc-uid-dropped", "pvc-uid-plain"} {
		if kept, err := p.Abandon(t.Context(), provisioner.Request{}, byPV[pv].PV); err != nil || kept != "" {
			t.Fatalf("Abandon %s: %q, %v", pv, kept, err)
		}
	}
	if got := entries(t, records); len(got) != 0 {
		t.Errorf("records left: %v", got)
	}
	if got := entries(t, root); !slices.Equal(got, []string{RecordsDir, "ns-kept-pvc-uid-kept"}) {
		t.Errorf("root holds %v; want only the committed volume", got)
	}
	if _, ok := f.sizes["ns-dropped-pvc-uid-dropped"]; ok {
		t.Error("the abandoned volume is still in the backend")
	}

	// A record whose names do not go together is never acted on.
	if err := os.WriteFile(filepath.Join(records, "pvc-x.json"), []byte(`{"pv":"pvc-x","name":"../etc","namespace":"ns","claim":"c"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if left, err := p.Unsettled(t.Context()); err != nil || len(left) != 0 {
		t.Errorf("Unsettled with a forged record = %v, %v; want none", left, err)
	}
}

// TestAbandonTakesBackOnlyWhatItMade: a Tentative Provision marks a plain
// directory it makes with its PV's name, and Commit takes the marker away;
// Abandon removes the directory only when it made it and it holds nothing
// else: one that was there before, or was written in, is kept, and Abandon
// says why.
func TestAbandonTakesBackOnlyWhatItMade(t *testing.T) {
	root := t.TempDir()
	p, _ := newEnforcing(t, root)
	made, found, written, committed := request("made", ""), request("found", ""), request("written", ""), request("committed", "")
	if err := os.Mkdir(filepath.Join(root, "ns-found-pvc-uid-found"), 0o700); err != nil {
		t.Fatal(err)
	}
	pvs := map[string]*provisioner.Unsettled{}
	for _, req := range []*provisioner.Request{&made, &found, &written, &committed} {
		req.Tentative = true
		provision(t, p, *req)
	}
	left, err := p.Unsettled(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i := range left {
		pvs[left[i].Claim.Name] = &left[i]
	}
	if err := os.WriteFile(filepath.Join(root, "ns-written-pvc-uid-written", "data"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(t.Context(), pvs["committed"].PV); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, filepath.Join(root, "ns-committed-pvc-uid-committed")); len(got) != 0 {
		t.Errorf("a committed volume holds %v, want its marker gone", got)
	}
	for name, want := range map[string]string{"made": "", "found": "it was there before this provisioning", "written": "files were written in it"} {
		kept, err := p.Abandon(t.Context(), provisioner.Request{}, pvs[name].PV)
		if err != nil || !strings.Contains(kept, want) || (want == "") != (kept == "") {
			t.Errorf("Abandon %s: %q, %v; want kept containing %q", name, kept, err, want)
		}
	}
	want := []string{RecordsDir, "ns-committed-pvc-uid-committed", "ns-found-pvc-uid-found", "ns-written-pvc-uid-written"}
	if got := entries(t, root); !slices.Equal(got, want) {
		t.Errorf("root holds %v, want %v", got, want)
	}
	if got := entries(t, filepath.Join(root, RecordsDir)); len(got) != 0 {
		t.Errorf("records left: %v", got)
	}
}
