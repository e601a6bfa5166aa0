// Package binder binds PersistentVolumeClaims to PersistentVolumes for a pod
// source that has no PV controller (the manifest directory), by the PV
// controller's rules, and serves the claims and volumes as that controller
// would leave them.
//
// It owns the bindings: the record of which claim (namespace, name, UID) holds
// which PersistentVolume, Bound or Released, kept in a small state file
// (claims.json) so that they survive restarts. Source wraps the inner pod
// source: pods, the Node and ConfigMaps/Secrets pass through; claims and
// volumes are returned as views (spec.volumeName, claimRef, phases) built from
// the records.
//
// The pure core is match (which PersistentVolume a claim gets) and plan (the
// records after one pass, from a snapshot of the inner source); the loop in
// Run is a thin driver that persists plan's result and publishes it.
//
// Invariants:
//
//   - A binding is never moved to another PersistentVolume. Once recorded, a
//     claim keeps its PV until the claim leaves the source (Released); a
//     claim whose PV vanished is Lost and keeps its record; a smaller PV that
//     appears later, a restart, or an edit of the claim changes nothing. A
//     state file that exists but cannot be read stops the constructor: the
//     binder never guesses bindings again from scratch behind the user's back.
//   - Nothing is bound while the inner source is not synced: the right
//     PersistentVolume may be in a file that has not parsed yet.
//   - Nothing is exposed as bound that is not on disk: a binding is written
//     (atomically and durably) before any view shows it.
//   - No data is ever deleted, and a Released PersistentVolume is never given
//     to another claim: every PV is retained, whatever its
//     persistentVolumeReclaimPolicy says. Only the claim that released it
//     (same namespace, name and UID) gets it back.
//   - The inner source's objects are never modified; views are copies.
//   - Run starts two goroutines (the inner source's Run and the binding loop,
//     which alone writes the records) and joins both before it returns.
package binder
