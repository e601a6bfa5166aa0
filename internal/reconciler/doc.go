// Package reconciler drives the actual state of the world towards the
// desired one.
//
// Each pass takes snapshots of both worlds, computes a plan (plan.go, a pure
// function) and hands each action to the operation executor: first teardowns
// of what is no longer wanted, then set-ups of what is missing and refreshes
// of content that changed. Passes run when either world changes, when an
// operation ends, when a backoff expires, and on a slow jittered resync as a
// safety net — never on a fast timer. A pass snapshots only the pods that
// changed in either world since the last one and those with an action
// planned by it (snapshot.go); the first pass and the resync snapshot all.
//
// Invariants:
//   - At start, the actual state is rebuilt from the pod directories on disk
//     (reconstruct.go); those volumes are Uncertain and are set up again
//     (idempotently: nothing is remounted or rewritten that is already right)
//     when still wanted.
//   - Nothing found on disk at start is torn down until every pod source has
//     delivered its complete state.
//   - A volume is torn down only when its pod no longer wants it; a spec
//     problem never tears down a healthy volume.
//   - A volume's set-up also prepares the subPath mounts its pod's
//     containers want of it (subpaths.go, through SubPaths); every teardown
//     of a pod's volume and the removal of a pod's directory first take all
//     of the pod's subPath mounts off, under the pod's lock alone, so none
//     outlives the volume it shows.
//   - On shutdown no new operation starts; running ones get a grace period;
//     volumes stay mounted.
package reconciler
