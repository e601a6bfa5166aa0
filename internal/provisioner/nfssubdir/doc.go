// Package nfssubdir is the NFS subdirectory provisioner
// (provisioner.NFSSubdirName): a StorageClass names one NFS export
// (parameters server and path), and each claim of the class gets a
// subdirectory of it — <namespace>-<claim>-<pv name>, or the class's
// pathPattern — and a PV with an nfs source for that subdirectory.
//
// It mounts each export it serves once, under
// <root-dir>/plugins/volume-agent.io~nfs-subdir/mounts/<name>, through the
// NFS volume plugin (deadlines, dead-mount checks, remounts), and keeps it
// mounted until Close. Every file-system call on an export runs under a
// deadline: a server that stops answering fails the call, never wedges it.
//
// It must never touch anything outside the export's subdirectory a PV
// records: Delete acts only on a PV whose annotations record the export and
// the subdirectory it was given, and whose nfs source points exactly
// there; a PV forged to point elsewhere is refused with nothing touched.
// Removal never crosses a mount point or follows a symlink (storagedir).
//
// A pathPattern built from labels or annotations lets a claim's author
// choose any directory of the export. So no two volumes share or nest
// (unlike the upstream nfs-subdir provisioner): Provision refuses a path
// that is, holds or is inside the nfs source of another PV the caller
// lists (Request.PVs: same server, a path below the export's; a PV of the
// whole export counts not) or that this process made a moment ago and no
// list shows yet (recentVolumes), or a directory being provisioned for
// another PV (its storagedir marker), and a pattern's path with a component
// starting with "archived-" or ".". Checking and taking a directory happen
// under one lock per server. A pattern's directory that is there already
// is taken only when it is empty, is marked for the claim's PV, or is the
// claim's PV's own (listed in Request.PVs): one that holds anything else —
// an older version's archive, a volume moved aside, a deleted PV's data —
// is refused (storagedir.CreateMarkedEmpty), so a claim's author can never
// be handed what someone else left there. The default name ends in the PV
// name, which no one else has: it is reused as it is.
//
// Delete with archiveOnDelete moves the subdirectory into the export's
// top-level storagedir.ArchiveDir (".archived", mode 0700) as
// archived-<namespace>-<claim>-<PV name>: a dot-name no pattern may name,
// so an archive is never inside a directory a claim can be given. Older
// versions archived next to the volume (archived-<last component>); those
// archives stay where they are, and the rule above refuses their parent.
//
// Storage made for a claim deleted before its PV exists is taken back with
// Abandon, never Delete: only a directory this provisioning made (a
// Tentative Provision marks it before anything else, so a restart still
// knows), that holds nothing but the marker and that no other PV uses, is
// removed; anything else is kept, and the caller told why.
//
// It returns no provisioner.ErrReschedule: the export is the same from
// every node.
package nfssubdir
