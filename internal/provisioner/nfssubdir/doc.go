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
// A pathPattern that gives two claims the same path gives them one
// directory (as the upstream nfs-subdir provisioner does): deleting either
// PV then removes or archives it for both. The default path, which ends in
// the PV name, is never shared.
//
// It returns no provisioner.ErrReschedule: the export is the same from
// every node.
package nfssubdir
