package evidence

import (
	"fmt"
	"strings"

	"github.com/volume-agent/volume-agent/internal/reclaim"
)

// Live is what is true now of a released volume's PersistentVolume, read
// from its source (the API server, not a record): the facts a recorded
// reclaim step is checked against.
type Live struct {
	// Released: the volume's claim is gone: the PersistentVolume is
	// Released, and no claim of its claimRef's UID exists.
	Released bool
	// Delete: its reclaim policy is Delete.
	Delete bool
	// Claim is the claim it is bound to now (its claimRef); zero when it
	// names none.
	Claim Owner
	// ReleasedBy is the claim that released it, recorded beside the first
	// reclaim step; zero when none is recorded.
	ReleasedBy Owner
}

// Use is what the storage of a released volume may be used for.
type Use string

// The uses a recorded step may be put to.
const (
	// Reclaim: the storage goes on towards deletion, as the recorded step
	// says (moved aside, deleted).
	Reclaim Use = "reclaim"
	// GiveBack: the storage, aside, is restored for the claim that
	// released it.
	GiveBack Use = "give back"
	// Refuse: neither; the storage stays where it is.
	Refuse Use = "refuse"
)

// StepVerdict is what a recorded step permits now, and if nothing, why.
type StepVerdict struct {
	Use Use
	// Why says why the step is refused; "" otherwise.
	Why string
}

// Step decides what the recorded step s of a volume permits, from the
// live facts l alone; the record is a request to check, never evidence:
//   - Reclaim, whatever the step, only while the volume is Released and
//     its reclaim policy is Delete;
//   - GiveBack for storage Aside, only to the claim that released it: the
//     claim the volume is bound to now and the recorded releasing claim
//     are one owner (Same: both known);
//   - Refuse otherwise: a deletion begun (Deleting) is never given back,
//     and storage is never given to another claim, to no claim, or when
//     the releasing claim is not recorded. An unknown step is refused.
func Step(s reclaim.Step, l Live) StepVerdict {
	if l.Released && l.Delete {
		return StepVerdict{Use: Reclaim}
	}
	switch s {
	case reclaim.Released:
		return refuse("no reclaim step is recorded and the volume %s: nothing to reclaim", state(l))
	case reclaim.Deleting:
		return refuse("its deletion was recorded, but the volume %s: a recorded step is acted on only while "+
			"the volume is Released with reclaim policy Delete; what is left of its storage is kept", state(l))
	case reclaim.Aside:
		return giveBack(l)
	}
	return refuse("unknown reclaim step %q (written by another version of the agent?)", s)
}

// giveBack is the verdict on storage aside whose volume is not Released
// with policy Delete.
func giveBack(l Live) StepVerdict {
	switch {
	case Same(l.ReleasedBy, l.Claim):
		return StepVerdict{Use: GiveBack}
	case l.ReleasedBy.UID == "":
		return refuse("its storage is aside and the volume %s, but the claim that released it is not recorded: "+
			"the storage is given back to no claim", state(l))
	case l.Claim.UID == "":
		return refuse("its storage is aside and the volume %s, and it names no claim now: the storage is given back "+
			"only to the claim that released it (UID %s)", state(l), l.ReleasedBy.UID)
	}
	return refuse("its storage is aside and the volume %s, and it is bound now to the claim of UID %s, not to the "+
		"claim that released it (UID %s): the storage is given back only to that claim", state(l), l.Claim.UID, l.ReleasedBy.UID)
}

// state says what keeps the volume from being reclaimed.
func state(l Live) string {
	var not []string
	if !l.Released {
		not = append(not, "is not Released (its claim exists, or it names none)")
	}
	if !l.Delete {
		not = append(not, "has a reclaim policy other than Delete")
	}
	return strings.Join(not, " and ")
}

func refuse(format string, args ...any) StepVerdict {
	return StepVerdict{Use: Refuse, Why: fmt.Sprintf(format, args...)}
}
