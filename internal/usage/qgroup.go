package usage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/volume-agent/volume-agent/internal/mount"
)

// qgroup is what a subvolume's level-0 qgroup says: the bytes the
// subvolume references and its limit on them.
type qgroup struct{ referenced, limit uint64 }

// errNoQuota says a subvolume's size is not limited by its qgroup
// (quotas are off, the qgroup has no referenced-bytes limit, or there is
// no btrfs(8)): the subvolume is walked as a plain directory.
var errNoQuota = errors.New("no qgroup limit")

// qgroupOf runs btrfs qgroup show on the subvolume at path (argv only,
// never a shell; killed at ctx's deadline and given up on like a stuck
// mount) and reads the qgroup of subvolume id, or the output's only
// level-0 qgroup when id is 0 (a kernel without STATX_SUBVOL).
func qgroupOf(ctx context.Context, path string, id uint64) (qgroup, error) {
	// -f lists only the qgroups that count path's subvolume; -re adds
	// the limits; --raw gives bytes. path is absolute (a Target's), so
	// btrfs(8) cannot read it as an option.
	cmd := exec.CommandContext(ctx, "btrfs", "qgroup", "show", "--raw", "-re", "-f", path) //nolint:gosec // G204: a fixed tool; the path is one argv entry
	cmd.WaitDelay = 2 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_, err := mount.Bounded(ctx, func() (struct{}, error) { return struct{}{}, cmd.Run() })
	switch {
	case ctx.Err() != nil:
		return qgroup{}, fmt.Errorf("btrfs qgroup show %s: %w", path, ctx.Err())
	case errors.Is(err, exec.ErrNotFound), err != nil && strings.Contains(stderr.String(), "not enabled"):
		return qgroup{}, errNoQuota
	case err != nil:
		return qgroup{}, fmt.Errorf("btrfs qgroup show %s: %w: %s", path, err, mount.Fold(stderr.String()))
	}
	return parseQgroup(stdout.String(), id)
}

// parseQgroup reads the row of qgroup 0/id (any 0/ row when id is 0) in
// the output of btrfs qgroup show --raw -re: qgroup ID, referenced,
// exclusive, referenced limit ("none" when there is none), exclusive
// limit.
func parseQgroup(out string, id uint64) (qgroup, error) {
	want := "0/" + strconv.FormatUint(id, 10)
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || (f[0] != want && (id != 0 || !strings.HasPrefix(f[0], "0/"))) {
			continue
		}
		if f[3] == "none" {
			return qgroup{}, errNoQuota
		}
		ref, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return qgroup{}, fmt.Errorf("qgroup %s: referenced bytes %q: %w", f[0], f[1], err)
		}
		limit, err := strconv.ParseUint(f[3], 10, 64)
		if err != nil {
			return qgroup{}, fmt.Errorf("qgroup %s: referenced limit %q: %w", f[0], f[3], err)
		}
		return qgroup{referenced: ref, limit: limit}, nil
	}
	return qgroup{}, fmt.Errorf("no qgroup %s in the output of btrfs qgroup show", want)
}

// measurement is the measurement of a subvolume by its qgroup: the limit
// is the capacity; available is what the limit still allows, and no more
// than the file system has free (fs, its statfs). btrfs allocates inodes
// as it needs them (statfs reports none, free or total) and a qgroup
// counts bytes only: the inodes are left 0, unknown.
func (q qgroup) measurement(fs fsSize) Measurement {
	avail := q.limit - min(q.referenced, q.limit)
	return Measurement{CapacityBytes: q.limit, AvailableBytes: min(avail, fs.available), UsedBytes: q.referenced,
		Inodes: fs.inodes, InodesFree: fs.inodesFree, Method: MethodQuota}
}
