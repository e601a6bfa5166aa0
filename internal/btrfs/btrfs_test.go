package btrfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/btrfs/btrfstest"
)

// TestOnLoopBtrfs drives every method against a real btrfs: quotas off
// then on, a subvolume told from a plain directory, its limit enforced,
// read back from its qgroup and raised, a nested subvolume refusing the
// deletion of its parent, and the deletion with the qgroup's.
func TestOnLoopBtrfs(t *testing.T) {
	root := btrfstest.Mount(t, false)
	ctx := t.Context()
	tool := Tool{}
	if on, err := tool.QuotasOn(ctx, root); err != nil || on {
		t.Fatalf("quotas on a new file system: %v, %v; want off", on, err)
	}
	if on, err := tool.QuotasOn(ctx, t.TempDir()); err != nil || on {
		t.Fatalf("quotas on a directory not on btrfs: %v, %v; want off", on, err)
	}
	if err := tool.EnableQuotas(ctx, root); err != nil {
		t.Fatal(err)
	}
	if on, err := tool.QuotasOn(ctx, root); err != nil || !on {
		t.Fatalf("quotas after enabling them: %v, %v; want on", on, err)
	}

	vol, plain := filepath.Join(root, "vol"), filepath.Join(root, "plain")
	if err := tool.CreateSubvolume(ctx, vol); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(plain, 0o700); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{vol: true, plain: false, filepath.Join(root, "missing"): false, root: true} {
		if sub, err := IsSubvolume(path); err != nil || sub != want {
			t.Errorf("IsSubvolume(%s) = %v, %v; want %v", path, sub, err, want)
		}
	}
	id, err := tool.SubvolumeID(ctx, vol)
	if err != nil || id < 256 {
		t.Fatalf("SubvolumeID = %d, %v", id, err)
	}

	if err := tool.SetLimit(ctx, vol, 4<<20); err != nil {
		t.Fatal(err)
	}
	if err := btrfstest.WriteSynced(filepath.Join(vol, "f"), 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := btrfstest.WriteSynced(filepath.Join(vol, "g"), 4<<20); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("5 MiB into a 4 MiB limit: %v, want EDQUOT", err)
	}
	unix.Sync() // qgroups are counted when a transaction commits
	q, err := tool.QgroupOf(ctx, vol, id)
	if err != nil {
		t.Fatal(err)
	}
	if !q.Limited || q.Limit != 4<<20 || q.ID != id || q.Referenced < 1<<20 || q.Referenced > 4<<20 || q.Exclusive > q.Referenced {
		t.Errorf("qgroup %+v; want 0/%d, limited to 4 MiB, 1-4 MiB referenced", q, id)
	}
	if any, err := tool.QgroupOf(ctx, vol, 0); err != nil || any.ID != id {
		t.Errorf("QgroupOf(id 0) = %+v, %v; want 0/%d, the only level-0 qgroup counting it", any, err, id)
	}

	if err := tool.SetLimit(ctx, vol, 16<<20); err != nil { // room for a nested subvolume
		t.Fatal(err)
	}
	if q, err := tool.QgroupOf(ctx, vol, id); err != nil || q.Limit != 16<<20 {
		t.Errorf("after raising the limit: %+v, %v; want 16 MiB", q, err)
	}
	nested := filepath.Join(vol, "nested")
	if err := tool.CreateSubvolume(ctx, nested); err != nil {
		t.Fatal(err)
	}
	if err := tool.DeleteSubvolume(ctx, vol); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("delete a subvolume holding another: %v, want ErrNotEmpty", err)
	}
	nestedID, err := tool.SubvolumeID(ctx, nested)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{nested, vol} {
		if err := tool.DeleteSubvolume(ctx, dir); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []uint64{nestedID, id} {
		if err := tool.Sync(ctx, root); err != nil {
			t.Fatal(err)
		}
		if err := tool.WaitDropped(ctx, root, id); err != nil {
			t.Fatal(err)
		}
		// Linux 6.7 and later destroy the qgroup with the subvolume; an
		// older kernel leaves it. Either way it is gone after this, and
		// destroying it again is no error.
		if err := tool.DestroyQgroup(ctx, root, id); err != nil {
			t.Errorf("destroy qgroup 0/%d: %v", id, err)
		}
		if listed, err := tool.HasQgroup(ctx, root, id); err != nil || listed {
			t.Errorf("qgroup 0/%d after its destruction: %v, %v", id, listed, err)
		}
		if err := tool.DestroyQgroup(ctx, root, id); err != nil {
			t.Errorf("destroy qgroup 0/%d again: %v", id, err)
		}
	}
}
