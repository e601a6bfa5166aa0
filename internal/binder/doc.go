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
//     claim keeps its PV until the claim is released; a claim whose PV
//     vanished is Lost and keeps its record; a smaller PV that appears
//     later, a restart, or an edit of the claim changes nothing. A state
//     file that exists but cannot be read stops the constructor: the
//     binder never guesses bindings again from scratch behind the user's
//     back.
//   - Absence is not deletion. A claim is released only on the evidence
//     of evidence.Removed: the binding loop saw it in the synced source
//     since the agent started, then saw it missing for the settle time
//     while the source listed something (a source that lists no pods,
//     claims, PersistentVolumes or StorageClasses releases nothing), or,
//     missing at start, the source has listed objects without a pause for
//     the settle time; and no pod that is not terminated names it
//     (pvc-protection), and no pod on this node has its PersistentVolume
//     set up (Config.InUse, from the actual state). A Released static
//     PersistentVolume's binding is forgotten only once the PV was seen
//     missing for the reclaim delay; until then only the claim that
//     released it gets it back.
//   - Nothing is bound while the inner source is not synced: the right
//     PersistentVolume may be in a file that has not parsed yet.
//   - Nothing is exposed as bound that is not on disk: a binding is written
//     (atomically and durably) before any view shows it; a provisioned
//     PersistentVolume is written with it, before any view shows the PV.
//   - A claim is provisioned only when the inner source is synced, its class
//     exists there and names a provisioner the binder runs, and it neither
//     names a PersistentVolume (spec.volumeName) nor has a selector: a
//     class not known yet, or missing, makes the claim wait; it never falls
//     back to another class or to another PersistentVolume while a
//     provisioning for it runs. A provisioning is recorded (with its
//     request) before the provisioner is called, and called again after
//     a restart until its PersistentVolume is recorded, under the same
//     name, so the provisioner finds what it made, even when the claim
//     went away meanwhile (the PersistentVolume is then recorded Released
//     and reclaimed): a crash never leaves storage no record knows.
//   - No data is ever deleted but the storage the binder provisioned, once
//     released, with reclaim policy Delete (as recorded when provisioned),
//     and never before the reclaim delay: package reclaim takes it from
//     in place to aside (restorable: the same claim back gets it back) to
//     deleting, each step recorded in the state file before the
//     provisioner is asked to act, nothing moved or deleted while a pod on
//     this node has it set up, and the record dropped only after the
//     deletion succeeded. A deletion once begun is finished, whatever
//     restarts, and that PersistentVolume is never bound again. Every other
//     PersistentVolume is retained, whatever its
//     persistentVolumeReclaimPolicy says, and a Released PersistentVolume
//     is never given to another claim: only the claim that released it
//     (same namespace, name and UID) gets it back.
//   - A volume only grows. A Bound claim whose manifest asks for more than
//     its provisioned PersistentVolume has, when the PV's class allows
//     expansion and its provisioner can expand (provisioner.Expander), gets
//     the size recorded first (ExpandTo), then grown online by its
//     provisioner, made again after a restart until it succeeds, then the
//     PV's capacity recorded. Less, or a class that does not allow it, is
//     refused with the reason shown for the claim; nothing shrinks.
//   - A generic ephemeral volume's claim (<pod name>-<volume name>,
//     controlled by the pod) is made once, from its template, only when no
//     claim of that name exists, and recorded with the bindings, before any
//     view shows it or anything is provisioned for it: a restart finds it
//     and never makes a second one. Its UID includes a nonce drawn when it
//     is made and recorded beside it, so a pod that reuses a gone pod's
//     name gets a claim of its own and never the old claim's storage. It
//     is a claim of the source while its pod is listed, and lives and dies
//     with its pod: it is released once its pod's removal counts
//     (evidence.Removed: a pod seen since start and dropped, or a pod
//     absent at start once the source has listed objects for the settle
//     time) and no pod on this node has its PersistentVolume set up; its
//     record is forgotten once the pod is gone and it holds no Bound
//     binding nor a provisioning under way. A template with a field the
//     binder does not support makes no claim; the claim's lookup says why.
//   - The inner source's objects are never modified; views are copies.
//   - Run starts two goroutines (the inner source's Run and the binding loop,
//     which alone writes the records), and the loop one per running
//     provisioning operation; Run joins them all before it returns.
package binder
