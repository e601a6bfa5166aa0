// Package evidence holds the rules by which the agent decides that data
// may be destroyed, or that existing storage may be given to an owner.
// Every such decision calls it: a pod's teardown (its emptyDir and other
// writable volumes), the release of a claim and of a claim the agent made
// for a generic ephemeral volume, moving released storage aside, deleting
// or archiving it, binding, restoring and binding again after a restart.
// The package is pure: callers bring the facts, it returns a verdict and
// the reason, which callers show (in /v1/pods, /v1/claims, an event).
//
// The rules:
//
//   - Identity (Owner, Same). An owner is a UID plus, for an object the
//     agent makes or derives (a claim made for a generic ephemeral volume),
//     a nonce recorded when it was made. A name alone never identifies an
//     owner, and a UID that is not known never matches: a new object that
//     reuses a name never receives the old one's data.
//   - Observed absence (Removed). A removal counts only when the source
//     that owns the object says so: the API server, once synced, is
//     authoritative; the manifest directory counts a removal it saw while
//     the agent ran once it has held for the settle time, and an object
//     absent at start only once the directory has listed objects, without
//     a pause, for the same time. A source that is not synced, or lists
//     nothing, is never evidence that something it does not list is gone.
//   - Recorded state never overrides live facts (Step). A reclaim step
//     recorded earlier, in claims.json or in a PersistentVolume's
//     annotations (which anyone allowed to update PVs can write), is a
//     request to check, not evidence: it is acted on only while the
//     PersistentVolume is Released (or its claim is gone by UID), its
//     reclaim policy allows it, and nothing uses it.
package evidence
