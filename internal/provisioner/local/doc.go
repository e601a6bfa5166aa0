// Package local is the node-local provisioner (provisioner.LocalName,
// "local.volume-agent.io", also serving its first name
// "volume-agent.io/local"): for a claim of a WaitForFirstConsumer class
// whose selected node is this node, it makes a directory under the local
// path root and describes a local PV pinned to this node; for a released
// PV it made, it removes or archives that directory.
//
// Permissions: the root is root-owned and 0700, also when it existed with
// another mode: no other user of the node can reach, list, read or delete
// a volume, nor one pending deletion or archived. Each volume directory is
// 0777, like an emptyDir, so that the pods of a claim may run as any UID:
// containers reach it through their own mount, which needs no access to
// the root. Nothing is chowned on a pod's behalf.
//
// Enforced capacity: a class whose parameter enforce is "true" (the
// default) gets, for each claim, a volume of Config.Capacity (a btrfs
// subvolume with a qgroup limit, or an ext4 image mounted on the volume's
// directory) of the claim's requested size, and its PV the annotation
// AnnCapacity naming the backend (sized by it to hold at least that
// request); "false" keeps the plain directory. Such a volume is not
// renamed aside: the reclaim delay's aside step keeps it in place (its PV
// is released, so no new pod reaches it), and Delete hands it to the
// backend: to remove it, or, when its PV says archive, to keep it as
// archived-<name> (capacity.Archiver: the image renamed and detached, or
// the subvolume renamed with its qgroup limit), recorded with its size
// and counted in Room until it is removed by hand. Without a backend
// (Capacity nil), enforced classes are refused with the reason, never
// served unenforced.
//
// Invariants:
//
//   - A volume is the directory <namespace>-<claim>-<PV name> directly under
//     the root (the namespace and claim part shortened when the name would
//     pass 250 bytes), so a retry after a crash finds the directory of the
//     same PV name and never makes a second one.
//   - Provisioning only for this node: a request whose selected node is
//     another is refused. Failures of the root itself (missing, read-only,
//     full, not writable) wrap provisioner.ErrReschedule; the root is never
//     re-created by Provision, since a missing root may be a disk that is not
//     mounted.
//   - Delete touches only a directory this provisioner could have made: the
//     PV's local path must be directly under the root, end with
//     "-<PV name>", and the PV must be pinned to this node; anything else (a
//     PV forged to point at /etc) is refused before anything is touched.
//     Removal never follows a symlink and never crosses a mount
//     (storagedir); archiving renames to archived-<name> and never
//     overwrites.
package local
