package usage

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/volume-agent/volume-agent/internal/dsw"
)

// How a measurement was made.
const (
	// MethodStatfs: statfs(2) of the volume's own file system.
	MethodStatfs = "statfs"
	// MethodWalk: the used bytes and inodes by a walk of the volume's
	// directory; capacity and what is free from statfs of the file
	// system the directory is on.
	MethodWalk = "walk"
	// MethodQuota: a btrfs subvolume's qgroup (the bytes it references,
	// its limit as the capacity); see quotaMeasurement.
	MethodQuota = "quota"
)

// Measurement is a volume's usage at one time.
type Measurement struct {
	CapacityBytes, AvailableBytes, UsedBytes uint64
	Inodes, InodesFree, InodesUsed           uint64
	Method                                   string
	Time                                     time.Time
	// SizeLimitBytes is the target's SizeLimit when it was measured; 0
	// for a measurement by quota, the qgroup limit enforcing it. When set,
	// it is CapacityBytes too (withSizeLimit).
	SizeLimitBytes int64
	// NotEnforced says why the size of a volume the agent limits with a
	// btrfs qgroup (Target.QuotaLimit) is not enforced now (quotas off,
	// the qgroup or its limit could not be made, more nested subvolumes
	// than the agent limits); "" when it is, or the volume has no such
	// limit. Each measurement tries again.
	NotEnforced string
}

// withSizeLimit is m as the volume's users see it when it has a size
// limit nothing enforces (SizeLimitBytes): the limit is its capacity, and
// what is available what the limit still leaves (never more than its file
// system has), so that alerts on used/capacity work as they do for a
// claim. A measurement without such a limit is returned as it is.
func (m Measurement) withSizeLimit() Measurement {
	if m.SizeLimitBytes <= 0 {
		return m
	}
	limit := uint64(m.SizeLimitBytes)
	m.CapacityBytes = limit
	m.AvailableBytes = min(m.AvailableBytes, limit-min(m.UsedBytes, limit))
	return m
}

// Exceeded reports whether the volume used more than its size limit.
func (m Measurement) Exceeded() bool {
	return m.SizeLimitBytes > 0 && m.UsedBytes > uint64(m.SizeLimitBytes)
}

// ExceededMessage says that volume uses more than its size limit, as the
// kubelet's eviction manager says it of an emptyDir, with the bytes used.
func ExceededMessage(volume string, m Measurement) string {
	return fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q: %d bytes used", volume, LimitString(m.SizeLimitBytes), m.UsedBytes)
}

// LimitString is a size limit of n bytes as a quantity: "1Mi", "1G".
func LimitString(n int64) string {
	format := resource.BinarySI
	if n%1024 != 0 {
		format = resource.DecimalSI
	}
	return resource.NewQuantity(n, format).String()
}

// Target is a volume to measure and the names it is reported under.
type Target struct {
	Key dsw.Key
	// Namespace and Pod name the volume's pod; Volume is its name in the
	// pod's spec; Claim, for a claim's volume, the claim's name.
	Namespace, Pod, Volume, Claim string
	// Path is where the volume's content is on the host.
	Path string
	// SizeLimit, when positive, is the size in bytes the volume should
	// not pass and that nothing else enforces (a disk emptyDir's
	// sizeLimit on a file system without quotas): a measurement above it
	// is Exceeded, and Config.Reporter is told when the volume passes it.
	SizeLimit int64
	// QuotaLimit, when positive, is the qgroup limit the volume, a btrfs
	// subvolume, must have (a disk emptyDir's sizeLimit with room for
	// metadata, an enforced claim's size). Each measurement by quota
	// makes it again where it is missing or smaller (quotas turned off and
	// on drop every limit), limits the subvolumes made inside the volume,
	// and measures the volume with them (btrfs.Tool.Enforce).
	QuotaLimit int64
	// QuotaPath, when set, is where the volume's subvolume is reached for
	// its qgroups, when Path is not a place to run btrfs(8) from: an
	// enforced claim's PV path, whose parent (the local path root) is on
	// the same btrfs, where Path is a bind mount whose parent is not (a
	// qgroup command run inside a volume over its limit fails with
	// EDQUOT).
	QuotaPath string
}

// quotaPath is t.QuotaPath, or t.Path.
func (t Target) quotaPath() string {
	if t.QuotaPath != "" {
		return t.QuotaPath
	}
	return t.Path
}

// Stat is a target and its latest measurement.
type Stat struct {
	Target
	Measurement
}
