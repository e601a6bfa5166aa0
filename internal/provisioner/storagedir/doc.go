// Package storagedir creates, removes and archives the directories that
// provisioners hand out as volumes, below a base directory: the local
// provisioner's root or the mounted NFS export.
//
// Invariants:
//
//   - Nothing outside base is ever created, removed or renamed. Every path
//     below base is resolved with openat2(2) RESOLVE_BENEATH |
//     RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV, one directory descriptor at a
//     time: a symlink or a mount point planted anywhere below base makes
//     the operation fail, it is never followed. base itself must be an
//     absolute path without symlinks (callers resolve it once).
//   - A rel is checked by ValidRel first: relative, clean, no "..", never
//     base itself.
//   - Every operation is idempotent, so that a provisioner retrying after a
//     crash finds what the interrupted call did: Create reuses an existing
//     directory, Remove of a missing directory succeeds, Archive of a
//     directory already archived returns the archive.
//   - Remove never crosses a mount and never follows a symlink (it is
//     mount.RemoveAll); Archive never overwrites an earlier archive.
//   - A new entry is made durable: the parent directory is fsynced after a
//     mkdir or a rename, so a crash cannot lose it.
//   - CreateMarked writes in a directory it makes, before anything else, a
//     marker (MarkerName) naming whom it made it for, and refuses a
//     directory marked for someone else. RemoveMarked removes a directory
//     only while that marker names the caller's owner and is all it holds
//     (unlink, then rmdir): a directory that existed before, or holds
//     anything written since, is never removed by it. CreateMarkedEmpty
//     takes a directory not marked for its owner only while it is empty.
//   - ArchiveInto moves a volume into the top-level ArchiveDir, a
//     dot-name, so that an archive never lies in a directory that can be
//     handed out as a volume.
package storagedir
