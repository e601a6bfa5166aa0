package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenRootResolvesSymlinks(t *testing.T) {
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	root, err := openRoot(filepath.Join(base, "link", "root"), "node-1")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.EvalSymlinks(filepath.Join(base, "real"))
	if root != filepath.Join(want, "root") {
		t.Fatalf("root = %s, want the resolved %s", root, filepath.Join(want, "root"))
	}
}

// TestRootRecordsTheNode: openRoot refuses a root recorded for another
// node and writes nothing; recordNode writes the record where there is
// none (or an empty one), and refuses another node's too.
func TestRootRecordsTheNode(t *testing.T) {
	root := t.TempDir()
	marker := filepath.Join(root, "node-name")
	for _, tc := range []struct {
		name, before, node, wantErr, afterOpen, after string
	}{
		{name: "first start", node: "node-1", after: "node-1\n"},
		{name: "same node", before: "node-1\n", node: "node-1", afterOpen: "node-1\n", after: "node-1\n"},
		{name: "another node", before: "node-1\n", node: "node-2", wantErr: `belongs to node "node-1"`, afterOpen: "node-1\n", after: "node-1\n"},
		{name: "empty record left by a crash", before: "", node: "node-2", after: "node-2\n"},
		{name: "blank record", before: " \n", node: "node-3", afterOpen: " \n", after: "node-3\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_ = os.Remove(marker)
			if tc.name != "first start" {
				if err := os.WriteFile(marker, []byte(tc.before), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := openRoot(root, tc.node)
			if (err != nil) != (tc.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("openRoot = %v, want error %q", err, tc.wantErr)
			}
			if got, _ := os.ReadFile(marker); string(got) != tc.afterOpen {
				t.Fatalf("node-name after openRoot = %q, want %q: it records nothing", got, tc.afterOpen)
			}
			err = recordNode(root, tc.node)
			if (err != nil) != (tc.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("recordNode = %v, want error %q", err, tc.wantErr)
			}
			if got, _ := os.ReadFile(marker); string(got) != tc.after {
				t.Fatalf("node-name = %q, want %q", got, tc.after)
			}
			entries, _ := os.ReadDir(root)
			if len(entries) != 1 {
				t.Fatalf("root holds %v; want only node-name (no temporary file left)", entries)
			}
		})
	}
}
