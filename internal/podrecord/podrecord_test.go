package podrecord

import (
	"os"
	"path/filepath"
	"testing"
)

// A record is written into a directory that does not exist yet, replaced
// by the next write of its UID, read back, and a temporary file a crash
// left is removed by Load; nothing but the record stays in the directory.
func TestWriteReplacesAndLoadCleansUp(t *testing.T) {
	s := Store{Dir: filepath.Join(t.TempDir(), "records")}
	for _, name := range []string{"web", "web-2"} {
		if err := s.Write(Record{UID: "u1", Namespace: "ns", Name: name, Source: "manifests"}); err != nil {
			t.Fatal(err)
		}
	}
	crashed := filepath.Join(s.Dir, ".u1"+tmpMark+"1-1")
	if err := os.WriteFile(crashed, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	recs, err := s.Load()
	if err != nil || len(recs) != 1 || recs["u1"] != (Record{UID: "u1", Namespace: "ns", Name: "web-2", Source: "manifests"}) {
		t.Fatalf("Load = %+v, %v; want u1's last record", recs, err)
	}
	entries, err := os.ReadDir(s.Dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != "u1.json" {
		t.Fatalf("the records directory holds %v (%v), want u1.json only", entries, err)
	}
	if info, err := os.Stat(filepath.Join(s.Dir, "u1.json")); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("record mode = %v (%v), want 0600", info.Mode().Perm(), err)
	}
}

// A write that cannot be renamed into place (a directory at the record's
// name) fails, naming the pod, and leaves no temporary file.
func TestFailedWriteLeavesNoTemporaryFile(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(s.Dir, "u1.json", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(Record{UID: "u1", Source: "api"}); err == nil {
		t.Fatal("Write over a non-empty directory succeeded")
	}
	entries, _ := os.ReadDir(s.Dir)
	if len(entries) != 1 {
		t.Fatalf("the records directory holds %v, want only what was there", entries)
	}
}
