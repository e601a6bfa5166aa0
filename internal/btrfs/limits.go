package btrfs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
)

// A volume's limit is on its subvolume's own level-0 qgroup, 0/<ID>. Any
// user may make a subvolume inside a volume (btrfs subvolume create, or
// snapshot, needs no capability), whose writes the volume's qgroup never
// sees: each such nested subvolume gets a limit on its own level-0 qgroup
// too, from the room the volume has left. A level-1 qgroup counting them
// all would hold the sum exactly, but a pod's snapshot of a subvolume
// that a level-1 qgroup counts marks the kernel's counts inconsistent,
// and the kernel then counts nothing on the whole file system until a
// rescan (kernel 6.18: every limit of every volume lifted), a rescan the
// pod could have the agent start again and again. Level-0 qgroups alone
// stay consistent whatever a pod snapshots
// (TestEnforceKeepsCountsThroughASnapshot).

// Limits is what Enforce found and did.
type Limits struct {
	// Qgroup is the volume's: ID its subvolume's, Referenced the bytes
	// its subvolume and every subvolume below it reference (shared bytes
	// counted once per subvolume), Limit the volume's size.
	Qgroup Qgroup
	// Nested are the subvolumes below the volume.
	Nested []uint64
	// Changed: a limit had to be made or changed (after a quota disable
	// and enable, every one of them is gone).
	Changed bool
}

func level0(id uint64) string { return "0/" + strconv.FormatUint(id, 10) }

// Enforce makes the subvolume dir, and every subvolume below it, count
// against limit bytes, each on its own level-0 qgroup. With no subvolume
// below it, the volume's limit is limit, set where it has none or a
// smaller one (a limit is never lowered: an expansion may have raised
// it). With subvolumes below it (Nested), each one's limit, the volume's
// own included, is what it references now plus the room the volume has
// left (limit less what they all reference): a writer into any one of
// them is stopped (EDQUOT) where the volume is full, and never sooner.
// Writes into several of them at once may together pass the volume's
// size until the next Enforce, which finds them all, the room gone, and
// holds each at what it references; the caller, which measures the sum
// (Limits.Qgroup.Referenced), reports the volume over its size. A
// subvolume made since the last Enforce counts from the next one. It
// fails with ErrQuotasOff when quotas are off; with ErrTooManyNested,
// having limited the first MaxNested, when the volume holds more.
func (t Tool) Enforce(ctx context.Context, dir string, limit int64) (Limits, error) {
	id, nested, nerr := Nested(dir)
	if id == 0 {
		return Limits{}, nerr
	}
	root := outside(dir)
	out, err := t.showAll(ctx, root)
	if err != nil {
		return Limits{}, err
	}
	own, err := parseRow(out, level0(id))
	if err != nil {
		return Limits{}, err
	}
	size := uint64(max(limit, 0)) //nolint:gosec // G115: not negative
	l := Limits{Nested: nested, Qgroup: own}
	want := map[uint64]uint64{}
	if len(nested) == 0 {
		if !own.Limited || own.Limit < size {
			want[id] = size
		}
	} else {
		rows := map[uint64]Qgroup{id: own}
		used := own.Referenced
		for _, sub := range nested {
			if q, err := parseRow(out, level0(sub)); err == nil { // one not listed yet counts from the next Enforce
				rows[sub] = q
				used += q.Referenced
			}
		}
		room := uint64(0)
		if used < size {
			room = size - used
		}
		for sub, q := range rows {
			if target := q.Referenced + room; !q.Limited || q.Limit != target {
				want[sub] = target
			}
		}
		l.Qgroup.Referenced = used
	}
	for _, sub := range slices.Sorted(maps.Keys(want)) {
		if err := t.at(ctx, root, "qgroup", "limit", strconv.FormatUint(want[sub], 10), level0(sub), root); err != nil {
			return Limits{}, err
		}
		l.Changed = true
	}
	l.Qgroup.ID, l.Qgroup.Limit, l.Qgroup.Limited = id, size, true
	if own.Limited && own.Limit > size && len(nested) == 0 {
		l.Qgroup.Limit = own.Limit // raised by an expansion the caller's size lags
	}
	return l, nerr
}

// showAll lists every qgroup of dir's file system with its limits: one
// run for the volume and all its nested subvolumes.
func (t Tool) showAll(ctx context.Context, dir string) (string, error) {
	if err := absolute(dir); err != nil {
		return "", err
	}
	return t.Run(ctx, "qgroup", "show", "--raw", "-re", dir)
}

// parseRow reads the row of qgroup id ("0/257", "1/257") in the output of
// btrfs qgroup show --raw -re: its ID, referenced and exclusive bytes and
// referenced limit. Qgroup.ID is the number after the slash.
func parseRow(out, id string) (Qgroup, error) {
	f := row(out, 4, func(q string) bool { return q == id })
	if f == nil {
		return Qgroup{}, fmt.Errorf("qgroup %s is not listed by btrfs qgroup show", id)
	}
	return fields(f)
}

// maxDeleteRounds bounds DeleteTree's rounds of at most MaxNested
// deletions each: a volume with more subvolumes than that is left for
// the next attempt, which goes on where this one stopped.
const maxDeleteRounds = 64

// DeleteTree deletes the subvolume dir and every subvolume below it,
// deepest first, each by its ID (no path a tenant could swap is looked
// up, and only IDs found below dir's are deleted). found is told the IDs
// below it before any is deleted (a caller journals them, for their
// qgroups). It first takes the limits off the qgroups of the volume and
// of each subvolume below it: btrfs needs room in a qgroup to delete a
// subvolume it counts, and a volume held at what it references (see
// Enforce) could not be deleted otherwise. It fails with ErrNotEmpty only if a
// subvolume was made below dir meanwhile.
func (t Tool) DeleteTree(ctx context.Context, dir string, found func(ids []uint64) error) error {
	id, _, err := Nested(dir)
	if err != nil && id == 0 {
		return err
	}
	if err := t.lift(ctx, outside(dir), id); err != nil {
		return err
	}
	parent := filepath.Dir(dir) // the volume's path is gone once it is deleted
	for range maxDeleteRounds {
		_, nested, err := Nested(dir)
		if err != nil && !errors.Is(err, ErrTooManyNested) {
			return err
		}
		if len(nested) == 0 {
			if err := t.DeleteSubvolumeID(ctx, parent, id); err != nil {
				return err
			}
			return t.Sync(ctx, parent)
		}
		if err := found(nested); err != nil {
			return err
		}
		if err := t.lift(ctx, outside(dir), nested...); err != nil {
			return err
		}
		for i := len(nested) - 1; i >= 0; i-- {
			if err := t.DeleteSubvolumeID(ctx, parent, nested[i]); err != nil {
				return fmt.Errorf("delete subvolume %d inside %s: %w", nested[i], dir, err)
			}
		}
	}
	return fmt.Errorf("%s: more than %d subvolumes inside it; the next attempt deletes more", dir, maxDeleteRounds*MaxNested)
}

// lift takes the limits off the level-0 qgroups of subvolumes ids.
func (t Tool) lift(ctx context.Context, dir string, ids ...uint64) error {
	out, err := t.showAll(ctx, dir)
	if errors.Is(err, ErrQuotasOff) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, id := range ids {
		q := level0(id)
		if r, err := parseRow(out, q); err == nil && r.Limited {
			if err := t.at(ctx, dir, "qgroup", "limit", "none", q, dir); err != nil {
				return err
			}
		}
	}
	return nil
}
