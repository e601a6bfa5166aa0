package btrfs

import (
	"errors"
	"os"
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
	if err := tool.DestroyLevel1(ctx, root, id); err != nil {
		t.Fatal(err)
	}
	out, err := tool.showAll(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if f := row(out, 4, func(q string) bool { return q == Level1(id) }); f != nil {
		t.Errorf("qgroup %s left behind:\n%s", Level1(id), out)
	}
	if err := tool.DestroyLevel1(ctx, root, id); err != nil {
		t.Errorf("DestroyLevel1 again: %v", err)
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

// TestEnforceRefusesAForeignQgroup: a level-1 qgroup of the volume's ID
// that counts a subvolume outside the volume is someone else's: Enforce
// refuses it and sets no limit.
func TestEnforceRefusesAForeignQgroup(t *testing.T) {
	root := btrfstest.Mount(t, true)
	ctx := t.Context()
	tool := Tool{}
	vol, theirs := filepath.Join(root, "vol"), filepath.Join(root, "theirs")
	for _, dir := range []string{vol, theirs} {
		if err := tool.CreateSubvolume(ctx, dir); err != nil {
			t.Fatal(err)
		}
	}
	id, _ := tool.SubvolumeID(ctx, vol)
	other, _ := tool.SubvolumeID(ctx, theirs)
	for _, args := range [][]string{{"qgroup", "create", Level1(id), root}, {"qgroup", "assign", level0(other), Level1(id), root}} {
		if _, err := tool.Run(ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tool.Enforce(ctx, vol, 8<<20); err == nil || !strings.Contains(err.Error(), "not inside the volume") {
		t.Fatalf("Enforce with an operator's %s: %v; want a refusal", Level1(id), err)
	}
	out, err := tool.showAll(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if q, err := parseRow(out, Level1(id)); err != nil || q.Limited {
		t.Errorf("the operator's qgroup after the refusal: %+v, %v; want no limit set", q, err)
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

// TestEnforceFreezesASnapshotWithoutARescan: a pod may snapshot a nested
// subvolume of its volume (no capability needed). Assigning the snapshot,
// which shares its extents, would have the kernel rescan the whole file
// system, and a pod could start that again and again. Enforce freezes it
// instead: not assigned, held at its size by a level-0 limit (a write of
// new data fails with EDQUOT), its bytes counted in the volume's, the
// file system's counts left consistent, and DeleteTree still deletes it
// with the volume.
func TestEnforceFreezesASnapshotWithoutARescan(t *testing.T) {
	root := btrfstest.Mount(t, true)
	ctx := t.Context()
	tool := Tool{}
	vol := filepath.Join(root, "vol")
	nested, snap := filepath.Join(vol, "nested"), filepath.Join(vol, "snap")
	for _, dir := range []string{vol, nested} {
		if err := tool.CreateSubvolume(ctx, dir); err != nil {
			t.Fatal(err)
		}
	}
	const limit = 16 << 20
	if _, err := tool.Enforce(ctx, vol, limit); err != nil {
		t.Fatal(err)
	}
	if err := btrfstest.WriteSynced(filepath.Join(nested, "f"), 3<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := tool.Run(ctx, "subvolume", "snapshot", nested, snap); err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	sid, err := tool.SubvolumeID(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tool.Enforce(ctx, vol, limit)
	if err != nil || !slices.Equal(l.Frozen, []uint64{sid}) {
		t.Fatalf("Enforce after a snapshot %d inside the volume: %+v, %v; want it frozen", sid, l, err)
	}
	out, err := tool.showAll(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if f := row(out, 6, func(q string) bool { return q == Level1(l.Qgroup.ID) }); f == nil || slices.Contains(members(f[5]), level0(sid)) {
		t.Errorf("the snapshot was assigned to %s, which needs a rescan:\n%s", Level1(l.Qgroup.ID), out)
	}
	q, err := parseRow(out, level0(sid))
	if err != nil || !q.Limited || q.Limit != q.Referenced {
		t.Errorf("the snapshot's own qgroup %+v, %v; want it limited to its referenced bytes", q, err)
	}
	if l.Qgroup.Referenced < 6<<20 {
		t.Errorf("the volume counts %d bytes; want the nested subvolume's 3 MiB and the snapshot's 3 MiB", l.Qgroup.Referenced)
	}
	if err := btrfstest.WriteSynced(filepath.Join(snap, "g"), 1<<20); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("1 MiB of new data into the frozen snapshot: %v, want EDQUOT", err)
	}
	if status, err := tool.Run(ctx, "quota", "rescan", "-s", root); err != nil || !strings.Contains(status, "no rescan") {
		t.Errorf("quota rescan status %q, %v; want none started", status, err)
	}
	if again, err := tool.Enforce(ctx, vol, limit); err != nil || again.Changed {
		t.Errorf("Enforce again: %+v, %v; want nothing changed", again, err)
	}
	// The snapshot left the kernel's counts marked inconsistent (made by
	// the pod, with no qgroup to inherit), when an assignment counts
	// nothing of what a subvolume holds: one made afterwards is frozen too,
	// its bytes counted from its own qgroup, with no rescan; once the
	// counts are consistent again (an operator's rescan) the next Enforce
	// assigns it and lifts its own limit.
	fresh := filepath.Join(vol, "fresh")
	if err := tool.CreateSubvolume(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if err := btrfstest.WriteSynced(filepath.Join(fresh, "f"), 4<<20); err != nil {
		t.Fatal(err)
	}
	unix.Sync() // qgroups count at a transaction's commit
	fid, err := tool.SubvolumeID(ctx, fresh)
	if err != nil {
		t.Fatal(err)
	}
	before := l.Qgroup.Referenced
	if l, err = tool.Enforce(ctx, vol, limit); err != nil || !slices.Equal(l.Frozen, []uint64{sid, fid}) || l.Qgroup.Referenced < before+4<<20 {
		t.Errorf("Enforce after a fresh nested subvolume of 4 MiB: %+v, %v; want it frozen and counted (%d bytes before)", l, err, before)
	}
	if err := btrfstest.WriteSynced(filepath.Join(fresh, "g"), 1<<20); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("1 MiB more into the frozen fresh subvolume: %v, want EDQUOT", err)
	}
	if status, err := tool.Run(ctx, "quota", "rescan", "-s", root); err != nil || !strings.Contains(status, "no rescan") {
		t.Errorf("quota rescan status %q, %v; want none started", status, err)
	}
	if _, err := tool.Run(ctx, "quota", "rescan", "-w", root); err != nil {
		t.Fatal(err)
	}
	if l, err = tool.Enforce(ctx, vol, limit); err != nil || !slices.Equal(l.Frozen, []uint64{sid}) {
		t.Errorf("Enforce after a rescan: %+v, %v; want the fresh subvolume assigned, the snapshot still frozen", l, err)
	}
	if q, err := tool.QgroupOf(ctx, fresh, fid); err != nil || q.Limited {
		t.Errorf("the fresh subvolume's own qgroup once assigned: %+v, %v; want no limit", q, err)
	}
	if err := tool.DeleteTree(ctx, vol, func([]uint64) error { return nil }); err != nil {
		t.Fatalf("DeleteTree of a volume with a frozen snapshot: %v", err)
	}
	if _, err := os.Lstat(vol); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the volume is still there: %v", err)
	}
}
