package btrfs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A volume's limit is on a level-1 qgroup, 1/<its subvolume ID>, that the
// volume's subvolume and every subvolume below it are assigned to: a
// level-0 qgroup counts one subvolume only, and any user may make a
// subvolume inside a volume (btrfs subvolume create needs no capability),
// whose writes its parent's level-0 limit never sees. The level-1
// qgroup's ID is the volume's subvolume ID, so it is found again from the
// disk alone.

// Limits is what Enforce found and did.
type Limits struct {
	// Qgroup is the volume's level-1 qgroup after Enforce: its referenced
	// bytes are those of the volume and of every subvolume assigned.
	Qgroup Qgroup
	// Nested are the subvolumes below the volume: assigned to it, or
	// frozen.
	Nested []uint64
	// Frozen are the nested subvolumes that share extents with another
	// (a snapshot, or the source of one made before it was assigned):
	// assigning one would need a rescan of the whole file system, which a
	// tenant could start again at will, so each is held at its size by a
	// limit on its own level-0 qgroup instead, and its referenced bytes
	// are added to Qgroup's.
	Frozen []uint64
	// Changed: the limit, the qgroup or an assignment had to be made
	// (after a quota disable and enable, every one of them is gone).
	Changed bool
}

// Level1 names the level-1 qgroup of subvolume id.
func Level1(id uint64) string { return "1/" + strconv.FormatUint(id, 10) }

func level0(id uint64) string { return "0/" + strconv.FormatUint(id, 10) }

// Enforce makes the subvolume dir, and every subvolume below it, count
// against limit bytes: it creates the level-1 qgroup 1/<id> where it is
// missing, assigns the subvolume and those below it (Nested) to it (and
// takes out those moved out of the volume since: movedOut), sets
// its limit where it has none or a smaller one (a limit is never
// lowered: an expansion may have raised it), and takes off a limit on
// the subvolume's own level-0 qgroup (the agent's before the level-1
// qgroups), which would stay behind after an expansion. It fails with
// ErrQuotasOff when quotas are off; with ErrTooManyNested, having
// assigned the first MaxNested, when the volume holds more.
//
// A nested subvolume is assigned only while it shares no extent (its
// referenced and exclusive bytes are equal) and the kernel's counts are
// consistent, and with --no-rescan: the kernel then adds its bytes to the
// level-1 qgroup at once. Assigning one that shares extents (a snapshot)
// would need a rescan of the whole file system, which a pod making
// snapshots could keep going, and while the counts are inconsistent (a
// pod's snapshot marks them so) the kernel adds nothing of what it holds:
// such a subvolume is frozen (Limits.Frozen) instead. The agent never
// starts a rescan; an operator's (btrfs quota rescan) makes the counts
// consistent, and the next Enforce assigns what was frozen. The volume's
// own level-0 limit (set before level-1 limits) stays while the counts
// are inconsistent. A subvolume that came to share extents between the
// listing and its assignment (a snapshot made of it in that moment) is
// assigned without its earlier bytes counted: at most the bytes written
// to it before it was found escape the limit.
func (t Tool) Enforce(ctx context.Context, dir string, limit int64) (Limits, error) {
	id, nested, nerr := Nested(dir)
	if id == 0 {
		return Limits{}, nerr
	}
	root := outside(dir)
	out, inconsistent, err := t.show(ctx, root)
	if err != nil {
		return Limits{}, err
	}
	l := Limits{Nested: nested}
	group := Level1(id)
	if row(out, 6, func(q string) bool { return q == group }) == nil {
		if err := t.at(ctx, root, "qgroup", "create", group, root); err != nil && !exists(err) {
			return Limits{}, err
		}
		l.Changed = true
		if out, err = t.showAll(ctx, root); err != nil {
			return Limits{}, err
		}
	}
	var assigned []string
	if f := row(out, 6, func(q string) bool { return q == group }); f != nil {
		assigned = members(f[5])
	}
	gone, err := movedOut(dir, group, assigned, append([]uint64{id}, nested...))
	if err != nil {
		return Limits{}, err
	}
	for _, m := range gone {
		if err := t.at(ctx, root, "qgroup", "remove", m, group, root); err != nil {
			return Limits{}, err
		}
		l.Changed = true
	}
	for _, sub := range append([]uint64{id}, nested...) {
		own, err := parseRow(out, level0(sub))
		listed := err == nil
		switch {
		case slices.Contains(assigned, level0(sub)):
			continue
		case sub != id && listed && (own.Referenced != own.Exclusive || inconsistent):
			l.Frozen = append(l.Frozen, sub)
			if own.Limited && own.Limit <= own.Referenced {
				continue
			}
			if err := t.at(ctx, root, "qgroup", "limit", strconv.FormatUint(own.Referenced, 10), level0(sub), root); err != nil {
				return Limits{}, err
			}
		default:
			if err := t.assign(ctx, root, sub, group); err != nil {
				return Limits{}, err
			}
			if sub != id && listed && own.Limited { // frozen before; counted in the volume's from now on
				if err := t.at(ctx, root, "qgroup", "limit", "none", level0(sub), root); err != nil {
					return Limits{}, err
				}
			}
		}
		l.Changed = true
	}
	q, err := parseRow(out, group)
	if err != nil {
		return Limits{}, err
	}
	if !q.Limited || q.Limit < uint64(max(limit, 0)) { //nolint:gosec // G115: not negative
		if err := t.at(ctx, root, "qgroup", "limit", strconv.FormatInt(limit, 10), group, root); err != nil {
			return Limits{}, err
		}
		l.Changed = true
	}
	if own, err := parseRow(out, level0(id)); err == nil && own.Limited && !inconsistent {
		if err := t.at(ctx, root, "qgroup", "limit", "none", level0(id), root); err != nil {
			return Limits{}, err
		}
		l.Changed = true
	}
	if l.Changed {
		if out, err = t.showAll(ctx, root); err != nil {
			return Limits{}, err
		}
	}
	if l.Qgroup, err = parseRow(out, group); err != nil {
		return Limits{}, err
	}
	l.Qgroup.ID = id
	for _, sub := range l.Frozen {
		if q, err := parseRow(out, level0(sub)); err == nil {
			l.Qgroup.Referenced += q.Referenced
		}
	}
	return l, nerr
}

// movedOut returns the members of the volume's level-1 qgroup that are
// subvolumes linked outside the volume: a pod may rename a nested
// subvolume into another of its volumes (btrfs lets a subvolume's root
// move between subvolumes), where it counts against that volume from
// then on. A member whose subvolume was deleted (left behind by a kernel
// older than 6.7) is not one. A level-1 qgroup that counts such a
// subvolume, or a qgroup of another level, without counting the volume
// itself is not the agent's (an operator's 1/N): it is refused, its limit
// not the agent's to set.
func movedOut(dir, group string, assigned []string, ours []uint64) ([]string, error) {
	mine := len(ours) > 0 && slices.Contains(assigned, level0(ours[0]))
	var out []string
	for _, m := range assigned {
		level, num, _ := strings.Cut(m, "/")
		sub, err := strconv.ParseUint(num, 10, 64)
		if err != nil || level != "0" {
			return nil, fmt.Errorf("qgroup %s counts %s, which is not a subvolume inside the volume: refusing to limit it (is it an operator's qgroup?)", group, m)
		}
		if slices.Contains(ours, sub) {
			continue
		}
		linked, err := Linked(dir, sub)
		if err != nil {
			return nil, err
		}
		switch {
		case linked && !mine:
			return nil, fmt.Errorf("qgroup %s counts subvolume %d, which is not inside the volume: refusing to limit it (is it an operator's qgroup?)", group, sub)
		case linked:
			out = append(out, m)
		}
	}
	return out, nil
}

// assign makes subvolume sub's level-0 qgroup a member of group. A
// subvolume the kernel dropped since it was found (its qgroup gone) is
// no error, nor is one assigned already.
func (t Tool) assign(ctx context.Context, dir string, sub uint64, group string) error {
	err := t.at(ctx, dir, "qgroup", "assign", "--no-rescan", level0(sub), group, dir)
	var te *Error
	if err == nil || exists(err) || (errors.As(err, &te) && strings.Contains(te.Stderr, "No such file or directory")) {
		return nil
	}
	return err
}

// exists reports whether btrfs(8) said what it was to make exists.
func exists(err error) bool {
	var te *Error
	return errors.As(err, &te) && strings.Contains(te.Stderr, "File exists")
}

// showAll lists every qgroup of dir's file system with its limits and
// members (-c). btrfs-progs 6.2's -f leaves out the level-1 qgroups.
func (t Tool) showAll(ctx context.Context, dir string) (string, error) {
	out, _, err := t.show(ctx, dir)
	return out, err
}

// show is showAll, and whether btrfs(8) warned that the kernel's counts
// are marked inconsistent (a snapshot of a subvolume that a level-1
// qgroup counts, made without inheriting it, does that) until a rescan.
func (t Tool) show(ctx context.Context, dir string) (string, bool, error) {
	if err := absolute(dir); err != nil {
		return "", false, err
	}
	out, warn, err := t.run(ctx, "qgroup", "show", "--raw", "-re", "-c", dir)
	return out, strings.Contains(warn, "inconsistent"), err
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
