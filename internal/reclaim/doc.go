// Package reclaim owns the lifecycle of the storage of a released
// PersistentVolume whose reclaim policy is Delete: what is recorded, and
// what is done, at each step from the release of its claim to the storage
// being gone for good. It is pure: Next is a function of the recorded
// state and the facts of one moment, and the callers (the manifest binder,
// which records the state in claims.json, and the cluster provisioner,
// which records it in the PersistentVolume's annotations) record what Next
// returns before they take its action.
//
// The lifecycle:
//
//	Released ──(not in use)──▶ Aside(until) ──(until passed, not in use)──▶ Deleting ──▶ gone
//	                               │
//	                               └──(wanted back, not in use)──▶ restored: Released, or Bound again
//
// The steps:
//
//   - Released (Step ""): the claim is gone and the storage is in place.
//     Nothing happens while the volume is in use.
//   - Aside: the storage is moved aside, within its own file system, to a
//     name no pod and no claim can reach; it is deleted for good once
//     DeleteAfter has passed (now + the reclaim delay when the step began).
//     Until then it can be restored: the same claim back (manifest mode), or
//     an operator's request (cluster mode), moves it back. An operator may
//     also ask for it to be deleted at once (DeleteNow): only storage
//     Aside, moved aside, not in use and not wanted back; it then goes to
//     Deleting as at the end of the delay.
//   - Deleting: the storage is being removed or archived. A volume in this
//     step is never bound again, and the step is finished once begun: its
//     storage may already be half gone. Callers act on a recorded step
//     only while the volume's live state permits it (evidence.Step): a
//     record anyone could have written is never evidence on its own.
//
// Invariants:
//
//   - Every step is recorded before its action is taken; each action is
//     idempotent (moving aside what is aside already, restoring what is in
//     place, deleting what is gone all succeed), so a restart after a crash
//     anywhere finishes the step it finds recorded, exactly once.
//   - Nothing is moved, restored or deleted while the volume is in use: while
//     any pod on the node has it set up, or that is not known yet.
//   - Nothing is deleted before DeleteAfter, unless an operator asked for
//     that volume, by name, once it was aside (DeleteNow).
package reclaim
