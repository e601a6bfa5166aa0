// Package provisioner provisions PersistentVolumes for claims, as an
// external provisioner does for the PV controller: it watches claims whose
// volume.kubernetes.io/storage-provisioner annotation names one of its
// provisioners, creates the storage and a PV bound to the claim by its
// claimRef (the PV controller completes the binding), and when such a PV is
// Released with reclaim policy Delete, moves its storage aside, and once
// the reclaim delay has passed removes or archives it and deletes the PV
// (package reclaim; each step recorded in the PV's annotations first).
//
// The protocol lives here; the storage lives in the Provisioner
// implementations (provisioner/local, provisioner/nfssubdir).
//
// Invariants:
//
//   - One PV per claim: its name is pvc-<claim UID>, and storage is found
//     again by that name, so a crash between creating the storage and the
//     PV leaves exactly one of each after the retry.
//   - Only storage this agent provisioned is deleted: a PV must carry
//     pv.kubernetes.io/provisioned-by with a provisioner it runs, and the
//     provisioner checks that the PV points where it provisions.
//   - Storage made for a claim that is deleted before its PV is created
//     (or right after, unbound) is taken back, never archived. A Settler
//     (nfs-subdir) is asked to Abandon it, and keeps what the provisioning
//     did not make, what was written to since and what another PV uses;
//     once the PV exists it is told to Commit. The provisioner is given
//     the PVs that exist (Request.PVs: the informer's and those just
//     created that it does not show yet).
//   - Nothing is moved or deleted while a pod on this node has the PV set
//     up (Config.InUse), nor before the step is recorded on the PV; a step
//     once recorded is finished after any restart, and a Deleting PV is
//     never given back.
//   - A recorded step is a request to check, never evidence: anyone
//     allowed to update PVs can write the annotations. It is acted on only
//     while the PV's live state permits it (evidence.Step): reclaimed only
//     while Released (its claim gone by UID) with policy Delete, and
//     storage aside given back only while the PV is bound to the claim
//     that released it (volume-agent.io/released-by-uid, recorded with the
//     first step). The PV and its claim are read again from the API
//     server, not the cache, before the storage is deleted or given back,
//     and before the releasing claim is recorded. A step refused is left
//     as it is; the PV says why (volume-agent.io/reclaim-refused), with a
//     VolumeReclaimRefused event.
//   - With the CSI driver on (Config.CSIDriver), the claims that name the
//     driver are the external-provisioner's: no PV and no event from here.
//     The controller serves the legacy name's claims and the in-tree PVs
//     it made; a CSI PV, though it names the same provisioner, is never
//     reclaimed or grown here (always: only the driver's DeleteVolume
//     deletes it). The in-tree local PVs of this node that name the driver
//     are re-annotated with the legacy name, and the external-provisioner's
//     finalizer is removed from in-tree PVs of this node's provisioner, in
//     one update conditioned on the resourceVersion: the external-
//     provisioner would otherwise finalize them and, unable to delete a PV
//     that is not CSI, leave them Terminating for ever.
//   - A claim with a selector or a volumeAttributesClassName is refused
//     with an event, as the external provisioners refuse it.
//   - A class's archiveOnDelete is recorded on the PV when it is made
//     (volume-agent.io/archive-on-delete); an edited or deleted class never
//     changes what happens to existing data.
package provisioner
