package btrfs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Qgroup is a subvolume's level-0 qgroup, as btrfs qgroup show --raw -re
// lists it.
type Qgroup struct {
	ID         uint64 // the subvolume's: the qgroup is 0/ID
	Referenced uint64 // bytes the subvolume references
	Exclusive  uint64 // bytes it alone references
	// Limit is the limit on the referenced bytes where Limited; a qgroup
	// without one lists "none".
	Limit   uint64
	Limited bool
}

// QgroupOf reads the qgroup of subvolume id from btrfs qgroup show of the
// subvolume at path (-f: only the qgroups counting it; --raw: bytes; -re:
// the limits); id 0 takes the first level-0 qgroup listed, for a caller
// that cannot learn the ID (a kernel without STATX_SUBVOL). The kernel
// updates qgroups when it commits a transaction (every 30 s by default,
// or on sync), so the figures may lag the writes by that much.
func (t Tool) QgroupOf(ctx context.Context, path string, id uint64) (Qgroup, error) {
	if err := absolute(path); err != nil {
		return Qgroup{}, err
	}
	out, err := t.Run(ctx, "qgroup", "show", "--raw", "-re", "-f", path)
	if err != nil {
		return Qgroup{}, err
	}
	return parseQgroup(out, id)
}

// HasQgroup reports whether the file system of dir has qgroup 0/id. It
// fails with ErrQuotasOff when quotas are off.
func (t Tool) HasQgroup(ctx context.Context, dir string, id uint64) (bool, error) {
	if err := absolute(dir); err != nil {
		return false, err
	}
	out, err := t.Run(ctx, "qgroup", "show", "--raw", dir)
	if err != nil {
		return false, err
	}
	want := "0/" + strconv.FormatUint(id, 10)
	return row(out, 1, func(q string) bool { return q == want }) != nil, nil
}

// DestroyQgroup destroys qgroup 0/id of the file system of dir; one that
// is gone already (the kernel destroys a subvolume's qgroup with it from
// Linux 6.7 on) is no error.
func (t Tool) DestroyQgroup(ctx context.Context, dir string, id uint64) error {
	err := t.at(ctx, dir, "qgroup", "destroy", "0/"+strconv.FormatUint(id, 10), dir)
	var te *Error
	if errors.As(err, &te) && strings.Contains(te.Stderr, "No such file or directory") {
		return nil
	}
	return err
}

// parseQgroup reads the row of qgroup 0/id (the first 0/ row when id is
// 0) in the output of btrfs qgroup show --raw -re: qgroup ID, referenced,
// exclusive, referenced limit ("none" when there is none), exclusive
// limit, and, from btrfs-progs 6.x, the path.
func parseQgroup(out string, id uint64) (Qgroup, error) {
	want := "0/" + strconv.FormatUint(id, 10)
	f := row(out, 4, func(q string) bool { return q == want || (id == 0 && strings.HasPrefix(q, "0/")) })
	if f == nil {
		return Qgroup{}, fmt.Errorf("qgroup %s is not listed by btrfs qgroup show", want)
	}
	return fields(f)
}

// fields reads a row of btrfs qgroup show --raw -re: qgroup ID,
// referenced, exclusive, referenced limit ("none" when there is none).
// Qgroup.ID is the number after the level.
func fields(f []string) (Qgroup, error) {
	q := Qgroup{Limited: f[3] != "none"}
	_, num, _ := strings.Cut(f[0], "/")
	var err error
	if q.ID, err = strconv.ParseUint(num, 10, 64); err != nil {
		return Qgroup{}, fmt.Errorf("qgroup %s: ID: %w", f[0], err)
	}
	if q.Referenced, err = strconv.ParseUint(f[1], 10, 64); err != nil {
		return Qgroup{}, fmt.Errorf("qgroup %s: referenced bytes %q: %w", f[0], f[1], err)
	}
	if q.Exclusive, err = strconv.ParseUint(f[2], 10, 64); err != nil {
		return Qgroup{}, fmt.Errorf("qgroup %s: exclusive bytes %q: %w", f[0], f[2], err)
	}
	if q.Limited {
		if q.Limit, err = strconv.ParseUint(f[3], 10, 64); err != nil {
			return Qgroup{}, fmt.Errorf("qgroup %s: referenced limit %q: %w", f[0], f[3], err)
		}
	}
	return q, nil
}

// row returns the fields of the first row of the output of btrfs qgroup
// show that has at least n fields and a qgroup ID that match accepts, or
// nil.
func row(out string, n int, match func(qgroupID string) bool) []string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= n && match(f[0]) {
			return f
		}
	}
	return nil
}
