package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/mount"
)

// An agent that cannot enforce capacity runs on without a backend, warns,
// and hands the reason to the provisioner; one that can opens the root's
// backend (images on a root that is not btrfs) and records nothing yet.
func TestOpenCapacity(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	root := t.TempDir()
	b, err := openCapacity(t.Context(), options{unprivileged: true}, root, mount.Unprivileged{}, zap.New(core))
	if b != nil || err == nil || !strings.Contains(err.Error(), "--unprivileged") {
		t.Errorf("unprivileged: backend %v, reason %v; want none, and a reason naming --unprivileged", b, err)
	}
	if logs.FilterMessage("capacity not enforced on the local path root").Len() != 1 {
		t.Errorf("logs %v, want one warning", logs.All())
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("an unprivileged agent wrote %v into the root", entries)
	}
	var st unix.Statfs_t
	if os.Geteuid() != 0 || unix.Statfs(root, &st) != nil || st.Type == unix.BTRFS_SUPER_MAGIC {
		t.Skip("the rest needs root (a backend runs losetup and mount) and a temporary directory not on btrfs (whose quotas may be off)")
	}
	b, err = openCapacity(t.Context(), options{}, root, mount.System{}, zap.New(core))
	if b == nil || err != nil {
		t.Fatalf("openCapacity = %v, %v; want a backend", b, err)
	}
	if logs.FilterMessage("local path root opened for enforced capacity").Len() != 1 {
		t.Errorf("logs %v, want one line saying the backend", logs.All())
	}

	// A volume whose recovery fails (here: a record of a state this
	// version does not know) is on the root all the same, and counted.
	record := `{"name": "vol-a", "backend": "` + b.Kind() + `", "state": "shredding", "size": 1048576}`
	if err := os.WriteFile(filepath.Join(root, ".capacity", "vol-a.json"), []byte(record), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openCapacity(t.Context(), options{}, root, mount.System{}, zap.New(core)); err != nil {
		t.Fatal(err)
	}
	lines := logs.FilterMessage("local path root opened for enforced capacity").All()
	if f := lines[len(lines)-1].ContextMap(); f["volumes"] != int64(1) || f["notRecovered"] != int64(1) {
		t.Errorf("with one volume not recovered the start logs %v; want volumes 1, notRecovered 1", f)
	}
}
