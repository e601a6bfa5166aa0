package usage

import (
	"time"

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
)

// Measurement is a volume's usage at one time.
type Measurement struct {
	CapacityBytes, AvailableBytes, UsedBytes uint64
	Inodes, InodesFree, InodesUsed           uint64
	Method                                   string
	Time                                     time.Time
}

// Target is a volume to measure and the names it is reported under.
type Target struct {
	Key dsw.Key
	// Namespace and Pod name the volume's pod; Volume is its name in the
	// pod's spec; Claim, for a claim's volume, the claim's name.
	Namespace, Pod, Volume, Claim string
	// Path is where the volume's content is on the host.
	Path string
}

// Stat is a target and its latest measurement.
type Stat struct {
	Target
	Measurement
}
