package reclaim

import (
	"errors"
	"fmt"
	"time"
)

// Step is where a released volume's storage is in its lifecycle.
type Step string

// The steps, in order (see the package doc).
const (
	Released Step = ""
	Aside    Step = "Aside"
	Deleting Step = "Deleting"
)

// State is what the caller records for a released volume.
type State struct {
	Step Step `json:"step,omitempty"`
	// DeleteAfter is when the storage of an Aside volume may be deleted.
	DeleteAfter time.Time `json:"deleteAfter,omitzero"`
}

// Action is what the caller is to do once it has recorded the state Next
// returned.
type Action string

// The actions. Each is idempotent.
const (
	// Wait: nothing to do now.
	Wait Action = ""
	// MoveAside moves the storage aside (done when already aside).
	MoveAside Action = "move aside"
	// Restore moves the storage back to its place (done when in place);
	// once it succeeded, the caller records the volume as not released
	// (Step Released, or Bound again).
	Restore Action = "restore"
	// Delete removes or archives the storage, wherever it is (done when
	// gone); once it succeeded, the caller forgets the volume.
	Delete Action = "delete"
)

// Facts are what the caller knows at one moment.
type Facts struct {
	Now time.Time
	// Delay is the reclaim delay: how long storage stays aside.
	Delay time.Duration
	// Wanted: the volume is wanted back (its claim is back, or an
	// operator asked to keep it).
	Wanted bool
	// InUse: a pod on this node has the volume set up, or that is not
	// known yet.
	InUse bool
	// MovedAside: a MoveAside of the current Aside step succeeded since the
	// caller started (after a restart it is run again, which costs a
	// rename at most).
	MovedAside bool
}

// Next returns the state to record, and then the action to take, for a
// volume in state s. A state equal to s needs no new record.
func Next(s State, f Facts) (State, Action) {
	if f.InUse {
		return s, Wait
	}
	switch s.Step {
	case Released:
		if f.Wanted {
			return s, Wait
		}
		return State{Step: Aside, DeleteAfter: f.Now.Add(f.Delay)}, MoveAside
	case Aside:
		switch {
		case f.Wanted:
			return s, Restore
		case !f.MovedAside:
			return s, MoveAside
		case !f.Now.Before(s.DeleteAfter):
			return State{Step: Deleting}, Delete
		}
		return s, Wait
	case Deleting:
		return s, Delete
	}
	return s, Wait // a step Valid refuses: never acted on
}

// Valid checks a recorded step: a step this agent does not know (written
// by another version) is refused, never guessed at.
func Valid(s State) error {
	switch s.Step {
	case Released, Deleting:
		return nil
	case Aside:
		if s.DeleteAfter.IsZero() {
			return errors.New("reclaim step Aside without deleteAfter")
		}
		return nil
	}
	return fmt.Errorf("unknown reclaim step %q (written by another version of the agent?)", s.Step)
}

// Due returns when the state of a volume in s may change by the passing of
// time alone (its DeleteAfter), or the zero time.
func Due(s State) time.Time {
	if s.Step == Aside {
		return s.DeleteAfter
	}
	return time.Time{}
}

// Restorable reports whether a volume in s can still be given back: its
// deletion has not begun.
func Restorable(s State) bool { return s.Step == Released || s.Step == Aside }

// DeleteNow returns the state to record for storage an operator wants
// deleted before its DeleteAfter: Deleting, whose action (Delete) removes
// or archives it as the reclaim delay's end would. Only storage Aside, moved
// aside since the caller started, not in use and not wanted back is
// deleted early; anything else is refused with an error that says which
// step it is in and what to do.
func DeleteNow(s State, f Facts) (State, error) {
	if err := Valid(s); err != nil {
		return s, err
	}
	switch {
	case s.Step == Deleting:
		return s, errors.New("its storage is being deleted already: nothing to do but wait")
	case s.Step == Released && f.InUse:
		return s, errors.New("its storage is released but still in place: a pod on this node has it set up; " +
			"stop that pod, and once the storage is aside (volume-agent claims shows DELETION Aside), ask again")
	case s.Step == Released:
		return s, errors.New("its storage is released but not moved aside yet; ask again once volume-agent claims shows DELETION Aside")
	case f.Wanted:
		return s, errors.New("its claim is back, and its storage is being given back to it; " +
			"to delete the data, remove the claim again and ask once its storage is aside")
	case f.InUse:
		return s, errors.New("a pod on this node has its storage set up; stop that pod, then ask again")
	case !f.MovedAside:
		return s, errors.New("its storage is being moved aside again since the agent started; ask again in a few seconds")
	}
	return State{Step: Deleting}, nil
}
