package csi

import "time"

// deletion is the verdict on a DeleteVolume or DeleteSnapshot call: when
// what it names may be deleted, and whether the call must wait for it.
type deletion struct {
	// At is when it may be deleted: the first call's time plus the
	// reclaim delay (zero without a delay).
	At time.Time
	// Record: At is new, and must be recorded durably before the call is
	// answered, so that a restart keeps the time.
	Record bool
	// Wait: refuse the call; a call after At deletes.
	Wait bool
}

// deletionOf decides a delete call made at now for a volume or snapshot
// whose deletion was first asked for at asked (nil: this is the first
// call), with the reclaim delay: the first call records now + delay and
// waits, every call before that time waits, the first after it deletes.
// Without a delay (0) it deletes at once. It is the one place the driver
// decides whether the reclaim delay still holds a deletion back; the
// callers record what it says before they answer, and delete only
// through the local provisioner, which refuses what is in use.
func deletionOf(asked *time.Time, now time.Time, delay time.Duration) deletion {
	switch {
	case delay <= 0:
		return deletion{}
	case asked == nil:
		return deletion{At: now.Add(delay), Record: true, Wait: true}
	}
	return deletion{At: *asked, Wait: now.Before(*asked)}
}

// timeFormat is how a refusal names the time of a deletion: UTC, to the
// second.
const timeFormat = "2006-01-02T15:04:05Z"
