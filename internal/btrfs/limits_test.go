package btrfs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/btrfs/btrfstest"
)

// TestEnforceOnLoopBtrfs: a volume's limit is on its own level-0 qgroup,
// and a subvolume made inside it, then one inside that, count against it
// once Enforce has run: each is limited to what it holds plus the room
// the volume has left, so that a write into any of them past the
// volume's size fails with EDQUOT, and the volume's figure is the sum.
// Writes into two of them between two Enforces may pass the size; the
// next Enforce holds each where it is. Quotas turned off and on drop
// every limit; Enforce makes them again. DeleteTree deletes the volume
// with its nested subvolumes, by ID, and nothing outside it.
func TestEnforceOnLoopBtrfs(t *testing.T) {
	root := btrfstest.Mount(t, true)
	ctx := t.Context()
	tool := Tool{}
	vol, beside := filepath.Join(root, "vol"), filepath.Join(root, "beside")
	for _, dir := range []string{vol, beside} {
		if err := tool.CreateSubvolume(ctx, dir); err != nil {
			t.Fatal(err)
		}
	}
	const limit = 8 << 20
	l, err := tool.Enforce(ctx, vol, limit)
	if err != nil || !l.Changed || !l.Qgroup.Limited || l.Qgroup.Limit != limit || len(l.Nested) != 0 {
		t.Fatalf("Enforce on a new volume: %+v, %v", l, err)
	}
	id := l.Qgroup.ID
	if again, err := tool.Enforce(ctx, vol, limit); err != nil || again.Changed {
		t.Errorf("Enforce again: %+v, %v; want nothing changed", again, err)
	}

	nested := filepath.Join(vol, "nested")
	deeper := filepath.Join(nested, "deeper")
	for _, dir := range []string{nested, deeper} {
		if err := tool.CreateSubvolume(ctx, dir); err != nil {
			t.Fatal(err)
		}
	}
	nid, _ := tool.SubvolumeID(ctx, nested)
	did, _ := tool.SubvolumeID(ctx, deeper)
	l, err = tool.Enforce(ctx, vol, limit)
	if err != nil || !l.Changed || !slices.Equal(l.Nested, []uint64{nid, did}) {
		t.Fatalf("Enforce with nested subvolumes %d, %d: %+v, %v", nid, did, l, err)
	}
	if err := btrfstest.WriteSynced(filepath.Join(deeper, "f"), 9<<20); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("9 MiB into an 8 MiB volume through a nested subvolume: %v, want EDQUOT", err)
	}
	if err := os.Remove(filepath.Join(deeper, "f")); err != nil {
		t.Fatal(err)
	}
	if err := btrfstest.WriteSynced(filepath.Join(deeper, "f"), 4<<20); err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	if l, err = tool.Enforce(ctx, vol, limit); err != nil || l.Qgroup.Referenced < 4<<20 || l.Qgroup.Referenced > limit {
		t.Errorf("volume %+v, %v; want the nested bytes (4-8 MiB) counted", l.Qgroup, err)
	}
	if err := btrfstest.WriteSynced(filepath.Join(nested, "g"), 6<<20); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("10 MiB into an 8 MiB volume through its nested subvolumes: %v, want EDQUOT", err)
	}
	if err := btrfstest.WriteSynced(filepath.Join(vol, "h"), 6<<20); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("10 MiB into an 8 MiB volume through it and a nested subvolume: %v, want EDQUOT", err)
	}
	for _, f := range []string{filepath.Join(nested, "g"), filepath.Join(vol, "h")} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	// Between two Enforces, writes into two of them together pass the
	// size; the next Enforce sees the sum and holds each where it is.
	unix.Sync()
	if _, err := tool.Enforce(ctx, vol, limit); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(nested, "g"), filepath.Join(vol, "h")} {
		if err := btrfstest.WriteSynced(f, 3<<20); err != nil {
			t.Fatal(err)
		}
	}
	unix.Sync()
	if l, err = tool.Enforce(ctx, vol, limit); err != nil || l.Qgroup.Referenced <= limit {
		t.Errorf("volume %+v, %v; want the sum counted, past the limit", l.Qgroup, err)
	}
	for _, dir := range []string{vol, nested, deeper} {
		if err := btrfstest.WriteSynced(filepath.Join(dir, "more"), 1<<20); !errors.Is(err, unix.EDQUOT) {
			t.Errorf("1 MiB more into %s of a volume past its size: %v, want EDQUOT", dir, err)
		}
	}
	for _, f := range []string{filepath.Join(nested, "g"), filepath.Join(vol, "h")} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}

	if err := func() error { _, err := tool.Run(ctx, "quota", "disable", root); return err }(); err != nil {
		t.Fatal(err)
	}
	if _, err := tool.Enforce(ctx, vol, limit); !errors.Is(err, ErrQuotasOff) {
		t.Errorf("Enforce with quotas off: %v, want ErrQuotasOff", err)
	}
	if err := tool.EnableQuotas(ctx, root); err != nil {
		t.Fatal(err)
	}
	l, err = tool.Enforce(ctx, vol, limit)
	if err != nil || !l.Changed || l.Qgroup.Limit != limit {
		t.Fatalf("Enforce after quotas off and on: %+v, %v; want the limit made again", l, err)
	}
	if err := btrfstest.WriteSynced(filepath.Join(nested, "h"), 6<<20); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("past the limit after quotas off and on: %v, want EDQUOT", err)
	}

	var journaled []uint64
	if err := tool.DeleteTree(ctx, vol, func(ids []uint64) error { journaled = append(journaled, ids...); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(journaled, []uint64{nid, did}) {
		t.Errorf("DeleteTree told of %v, want %v", journaled, []uint64{nid, did})
	}
	if _, err := os.Lstat(vol); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volume after DeleteTree: %v", err)
	}
	if sub, err := IsSubvolume(beside); err != nil || !sub {
		t.Errorf("the subvolume beside the volume: %v, %v; want it kept", sub, err)
	}
	if err := tool.Sync(ctx, root); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []uint64{did, nid, id} {
		if err := tool.WaitDropped(ctx, root, sub); err != nil {
			t.Fatal(err)
		}
	}
}

// TestIoctlArgSizes: the ioctl argument structs have the size their
// request numbers encode (4096 bytes).
func TestIoctlArgSizes(t *testing.T) {
	for name, size := range map[string]uintptr{"search": unsafe.Sizeof(searchArgs{}), "ino lookup": unsafe.Sizeof(inoLookupArgs{}), "vol args v2": unsafe.Sizeof(volArgsV2{}), "fs info": unsafe.Sizeof(fsInfoArgs{}) * 4} {
		if size != 4096 {
			t.Errorf("%s args: %d bytes, want 4096", name, size)
		}
	}
}

// TestEnforceFollowsAMovedSubvolume: a nested subvolume renamed into
// another volume counts against that volume from its next Enforce, and
// no longer against the first: a write into it past the second volume's
// room fails.
func TestEnforceFollowsAMovedSubvolume(t *testing.T) {
	root := btrfstest.Mount(t, true)
	ctx := t.Context()
	tool := Tool{}
	one, two := filepath.Join(root, "one"), filepath.Join(root, "two")
	for _, dir := range []string{one, two, filepath.Join(one, "nested")} {
		if err := tool.CreateSubvolume(ctx, dir); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tool.Enforce(ctx, one, 8<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := tool.Enforce(ctx, two, 4<<20); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(one, "nested"), filepath.Join(two, "nested")); err != nil {
		t.Fatal(err)
	}
	l1, err := tool.Enforce(ctx, one, 8<<20)
	if err != nil || len(l1.Nested) != 0 {
		t.Fatalf("Enforce of the volume moved out of: %+v, %v", l1, err)
	}
	l2, err := tool.Enforce(ctx, two, 4<<20)
	if err != nil || !l2.Changed || len(l2.Nested) != 1 {
		t.Fatalf("Enforce of the volume moved into: %+v, %v", l2, err)
	}
	if err := btrfstest.WriteSynced(filepath.Join(two, "nested", "f"), 6<<20); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("6 MiB into the moved subvolume of a 4 MiB volume: %v, want EDQUOT", err)
	}
}

// TestEnforceKeepsCountsThroughASnapshot: a pod may snapshot its volume,
// or a subvolume inside it, into the volume (no capability needed). The
// kernel's counts stay consistent (a level-1 qgroup counting the source
// would have them marked inconsistent, and the kernel would then count
// nothing on the file system until a rescan): the snapshot is one more
// nested subvolume, limited with the others, so a write past the
// volume's size fails in it too, and a volume beside it keeps its limit.
func TestEnforceKeepsCountsThroughASnapshot(t *testing.T) {
	root := btrfstest.Mount(t, true)
	ctx := t.Context()
	tool := Tool{}
	vol, beside := filepath.Join(root, "vol"), filepath.Join(root, "beside")
	nested, snap := filepath.Join(vol, "nested"), filepath.Join(vol, "snap")
	for _, dir := range []string{vol, beside, nested} {
		if err := tool.CreateSubvolume(ctx, dir); err != nil {
			t.Fatal(err)
		}
	}
	const limit = 16 << 20
	for _, dir := range []string{vol, beside} {
		if _, err := tool.Enforce(ctx, dir, limit); err != nil {
			t.Fatal(err)
		}
	}
	if err := btrfstest.WriteSynced(filepath.Join(nested, "f"), 3<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := tool.Run(ctx, "subvolume", "snapshot", nested, snap); err != nil {
		t.Fatal(err)
	}
	if _, err := tool.Run(ctx, "subvolume", "snapshot", vol, filepath.Join(vol, "whole")); err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	l, err := tool.Enforce(ctx, vol, limit)
	if err != nil || len(l.Nested) != 3 || l.Qgroup.Referenced < 6<<20 {
		t.Fatalf("Enforce after two snapshots inside the volume: %+v, %v; want 3 nested, the snapshot's bytes counted", l, err)
	}
	cmd := exec.CommandContext(ctx, "btrfs", "qgroup", "show", root) //nolint:gosec // G204: the test's own file system
	if both, err := cmd.CombinedOutput(); err != nil || strings.Contains(string(both), "inconsistent") {
		t.Errorf("qgroup show: %v\n%s; want the counts consistent", err, both)
	}
	if err := btrfstest.WriteSynced(filepath.Join(snap, "g"), 12<<20); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("12 MiB into a snapshot inside a 16 MiB volume holding 6: %v, want EDQUOT", err)
	}
	if err := btrfstest.WriteSynced(filepath.Join(beside, "f"), 20<<20); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("20 MiB into the 16 MiB volume beside it: %v, want EDQUOT", err)
	}
	if err := tool.DeleteTree(ctx, vol, func([]uint64) error { return nil }); err != nil {
		t.Fatalf("DeleteTree of a volume holding snapshots: %v", err)
	}
	if _, err := os.Lstat(vol); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the volume is still there: %v", err)
	}
}
