package btrfs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A volume's limit is on its subvolume's own level-0 qgroup, 0/<ID>. Any
// user may make a subvolume inside a volume (btrfs subvolume create, or
// snapshot, needs no capability), whose writes the volume's qgroup never
// sees: each such nested subvolume gets a limit on its own level-0 qgroup
// too, so that the limits of the volume and of every subvolume below it
// add up to the volume's size. A level-1 qgroup counting them all would
// be simpler, but a pod's snapshot of a subvolume that a level-1 qgroup
// counts marks the kernel's counts inconsistent, and the kernel then
// counts nothing on the whole file system until a rescan (kernel 6.18:
// every limit of every volume lifted), a rescan the pod could have the
// agent start again and again. Level-0 qgroups alone stay consistent
// whatever the pod snapshots.

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

// Level1 names the level-1 qgroup of subvolume id, which versions that
// put limits there made; DestroyLevel1 takes one away.
func Level1(id uint64) string { return "1/" + strconv.FormatUint(id, 10) }

func level0(id uint64) string { return "0/" + strconv.FormatUint(id, 10) }

// Enforce makes the subvolume dir, and every subvolume below it, count
// against limit bytes. With no subvolume below it, the limit is on its
// own level-0 qgroup, set where it has none or a smaller one (a limit is
// never lowered: an expansion may have raised it). With subvolumes below
// it (Nested), the room left (limit less the bytes they all reference)
// is shared equally: each one's limit is what it references plus its
// share, so that the limits add up to limit, and a write that would take
// the volume past its size fails with EDQUOT wherever it is made. A
// subvolume that fills its share waits for the next Enforce to be given
// more of the room. A subvolume made since the last Enforce counts from
// the next one: what it holds then is counted, and the room shrinks by
// it. It fails with ErrQuotasOff when quotas are off; with
// ErrTooManyNested, having limited the first MaxNested, when the volume
// holds more.
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
		share := uint64(0)
		if used < size {
			share = (size - used) / uint64(len(rows))
		}
		for sub, q := range rows {
			if target := q.Referenced + share; !q.Limited || q.Limit != target {
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

// exists reports whether btrfs(8) said what it was to make exists.
func exists(err error) bool {
	var te *Error
	return errors.As(err, &te) && strings.Contains(te.Stderr, "File exists")
}

// showAll lists every qgroup of dir's file system with its limits and
// members (-c). btrfs-progs 6.2's -f leaves out the level-1 qgroups.
func (t Tool) showAll(ctx context.Context, dir string) (string, error) {
	if err := absolute(dir); err != nil {
		return "", err
	}
	return t.Run(ctx, "qgroup", "show", "--raw", "-re", "-c", dir)
}

// DestroyLevel1 destroys the level-1 qgroup of subvolume id (Enforce's),
// first taking its members out of it (a qgroup with members cannot be
// destroyed); one that is not there is no error.
func (t Tool) DestroyLevel1(ctx context.Context, dir string, id uint64) error {
	out, err := t.showAll(ctx, dir)
	if errors.Is(err, ErrQuotasOff) {
		return nil // turning quotas off destroyed every qgroup
	}
	if err != nil {
		return err
	}
	group := Level1(id)
	f := row(out, 6, func(q string) bool { return q == group })
	if f == nil {
		return nil
	}
	for _, m := range members(f[5]) {
		err := t.at(ctx, dir, "qgroup", "remove", m, group, dir)
		var te *Error
		if err != nil && !(errors.As(err, &te) && strings.Contains(te.Stderr, "No such file or directory")) {
			return err
		}
	}
	err = t.at(ctx, dir, "qgroup", "destroy", group, dir)
	var te *Error
	if errors.As(err, &te) && strings.Contains(te.Stderr, "No such file or directory") {
		return nil
	}
	return err
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

// members lists the members of a qgroup as the -c column gives them.
func members(col string) []string {
	if col == "-" {
		return nil
	}
	return slices.DeleteFunc(strings.Split(col, ","), func(s string) bool { return s == "" })
}

// maxDeleteRounds bounds DeleteTree's rounds of at most MaxNested
// deletions each: a volume with more subvolumes than that is left for
// the next attempt, which goes on where this one stopped.
const maxDeleteRounds = 64

// DeleteTree deletes the subvolume dir and every subvolume below it,
// deepest first, each by its ID (no path a tenant could swap is looked
// up, and only IDs found below dir's are deleted). found is told the IDs
// below it before any is deleted (a caller journals them, for their
// qgroups). It first takes the limits off the volume's qgroups: btrfs
// needs room in a qgroup to delete a subvolume it counts, and a volume
// over its limit (a nested subvolume's writes before its assignment)
// could not be deleted otherwise. It fails with ErrNotEmpty only if a
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

// lift takes the limits off the qgroups of subvolumes ids, level 1 and 0
// (a frozen nested subvolume's is on level 0).
func (t Tool) lift(ctx context.Context, dir string, ids ...uint64) error {
	out, err := t.showAll(ctx, dir)
	if errors.Is(err, ErrQuotasOff) {
		return nil
	}
	if err != nil {
		return err
	}
	var groups []string
	for _, id := range ids {
		groups = append(groups, Level1(id), level0(id))
	}
	for _, q := range groups {
		if r, err := parseRow(out, q); err == nil && r.Limited {
			if err := t.at(ctx, dir, "qgroup", "limit", "none", q, dir); err != nil {
				return err
			}
		}
	}
	return nil
}
