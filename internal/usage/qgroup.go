package usage

import (
	"errors"
	"os/exec"

	"github.com/volume-agent/volume-agent/internal/btrfs"
)

// errNoQuota says a subvolume's size is not limited by its qgroup
// (quotas are off, the qgroup has no referenced-bytes limit, or there is
// no btrfs(8)): the subvolume is walked as a plain directory.
var errNoQuota = errors.New("no qgroup limit")

// limitingQgroup is what quota needs of a subvolume's qgroup, read by
// read (btrfs.Tool.QgroupOf: one bounded btrfs qgroup show): errNoQuota
// where no qgroup limit applies.
func limitingQgroup(q btrfs.Qgroup, err error) (btrfs.Qgroup, error) {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, btrfs.ErrQuotasOff):
		return btrfs.Qgroup{}, errNoQuota
	case err != nil:
		return btrfs.Qgroup{}, err
	case !q.Limited:
		return btrfs.Qgroup{}, errNoQuota
	}
	return q, nil
}

// quotaMeasurement is the measurement of a subvolume by its qgroup q: the
// limit is the capacity; available is what the limit still allows, and no
// more than the file system has free (fs, its statfs). btrfs allocates
// inodes as it needs them (statfs reports none, free or total) and a
// qgroup counts bytes only: the inodes are left 0, unknown.
func quotaMeasurement(q btrfs.Qgroup, fs fsSize) Measurement {
	avail := q.Limit - min(q.Referenced, q.Limit)
	return Measurement{CapacityBytes: q.Limit, AvailableBytes: min(avail, fs.available), UsedBytes: q.Referenced,
		Inodes: fs.inodes, InodesFree: fs.inodesFree, Method: MethodQuota}
}
