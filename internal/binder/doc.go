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
// It also provisions (Config.Provisioners): a claim that a pod uses and that
// no PersistentVolume fits, whose StorageClass (from the inner source) names
// a provisioner the binder runs, gets a PersistentVolume named
// pvc-<claim uid> from that provisioner. The PersistentVolume lives in the
// claim's record, not in a file. There is only this node, so a claim is
// provisioned only once a pod uses it, whatever the class's
// volumeBindingMode (Immediate behaves as WaitForFirstConsumer), and its
// selected node is always this one.
//
// The pure core is match (which PersistentVolume a claim gets) and plan (the
// records after one pass, from a snapshot of the inner source, and the
// provisioning operations to run); the loop in Run is a thin driver that
// persists plan's result, publishes it, and runs the operations (ops.go:
// one goroutine per operation under a deadline, at most one per
// PersistentVolume, failures retried with a capped exponential backoff,
// never holding up other claims). An operation's result is recorded by the
// next pass.
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
//     (atomically and durably) before any view shows it; a provisioned
//     PersistentVolume is written with it, before any view shows the PV.
//   - A claim is provisioned only when the inner source is synced, its class
//     exists there and names a provisioner the binder runs: a class not
//     known yet, or missing, makes the claim wait; it never falls back to
//     another class or to another PersistentVolume while a provisioning for
//     it runs. A provisioning that crashed before it was recorded is done
//     again under the same name, so the provisioner finds what it made.
//   - No data is ever deleted but the storage the binder provisioned, once
//     released, with reclaim policy Delete (as recorded when provisioned):
//     once its claim has left the synced source and no pod that is not
//     terminated names the claim, the provisioner's Delete runs, and only
//     after it succeeded is the record dropped. A deletion once attempted
//     is finished, and that PersistentVolume is never bound again. Every
//     other PersistentVolume is retained, whatever its
//     persistentVolumeReclaimPolicy says, and a Released PersistentVolume
//     is never given to another claim: only the claim that released it
//     (same namespace, name and UID) gets it back.
//   - The inner source's objects are never modified; views are copies.
//   - Run starts two goroutines (the inner source's Run and the binding loop,
//     which alone writes the records), and the loop one per running
//     provisioning operation; Run joins them all before it returns.
package binder
