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

// TestEnforceOnLoopBtrfs: a volume's limit is on its level-1 qgroup, and a
// subvolume made inside it, then one inside that, count against it once
// Enforce has run: a write into the nested one past the limit fails with
// EDQUOT and the level-1 qgroup shows its bytes. Quotas turned off and on
// drop everything; Enforce makes it all again. DeleteTree deletes the
// volume with its nested subvolumes, by ID, and nothing outside it;
// DestroyLevel1 leaves no qgroup behind.
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
	if err := btrfstest.WriteSynced(filepath.Join(deeper, "f"), 4<<20); err != nil {
		t.Fatal(err)
	}
	if err := btrfstest.WriteSynced(filepath.Join(nested, "g"), 6<<20); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("10 MiB into an 8 MiB volume through its nested subvolumes: %v, want EDQUOT", err)
	}
	unix.Sync()
	l, err = tool.Enforce(ctx, vol, limit)
	if err != nil || l.Qgroup.Referenced < 4<<20 || l.Qgroup.Referenced > limit {
		t.Errorf("level-1 qgroup %+v, %v; want the nested bytes (4-8 MiB) counted", l.Qgroup, err)
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
// another volume leaves the first volume's qgroup and joins the other's
// at their next Enforce; neither volume's limit is refused.
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
	for _, dir := range []string{one, two} {
		if _, err := tool.Enforce(ctx, dir, 8<<20); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(filepath.Join(one, "nested"), filepath.Join(two, "nested")); err != nil {
		t.Fatal(err)
	}
	l1, err := tool.Enforce(ctx, one, 8<<20)
	if err != nil || !l1.Changed || len(l1.Nested) != 0 {
		t.Fatalf("Enforce of the volume moved out of: %+v, %v", l1, err)
	}
	l2, err := tool.Enforce(ctx, two, 8<<20)
	if err != nil || !l2.Changed || len(l2.Nested) != 1 {
		t.Fatalf("Enforce of the volume moved into: %+v, %v", l2, err)
	}
	out, err := tool.showAll(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	nested := level0(l2.Nested[0])
	if f := row(out, 6, func(q string) bool { return q == Level1(l1.Qgroup.ID) }); f == nil || slices.Contains(members(f[5]), nested) {
		t.Errorf("%s still counts %s:\n%s", Level1(l1.Qgroup.ID), nested, out)
	}
	if f := row(out, 6, func(q string) bool { return q == Level1(l2.Qgroup.ID) }); f == nil || !slices.Contains(members(f[5]), nested) {
		t.Errorf("%s does not count %s:\n%s", Level1(l2.Qgroup.ID), nested, out)
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
