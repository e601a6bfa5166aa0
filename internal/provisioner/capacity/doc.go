// Package capacity makes provisioned local volumes whose size is enforced
// by the kernel: writes past a volume's size fail (EDQUOT, ENOSPC) instead
// of filling the disk under every other volume of the node.
//
// A Backend makes, grows, measures and removes volumes, each a directory
// <root>/<name>, through a driver of idempotent steps:
//
//   - btrfs (the root is on btrfs; quotas must be on, which each creation
//     checks again, so turning them on needs no restart): each volume is a
//     subvolume whose qgroup limits the bytes it references, and every
//     subvolume made inside it is limited to the room the volume has left
//     (btrfs.Tool.Enforce); usage is the sum of their qgroups, after their
//     limits are made again;
//     growing raises the limit; removal lifts the limit, deletes the
//     subvolumes made inside it and then it, by ID, waits for the cleaner
//     and destroys the qgroups.
//   - image (any other file system): each volume is a sparse ext4 image
//     <root>/<name>.img on a loop device (direct I/O where the kernel
//     allows), mounted on <root>/<name>; usage is statfs of the mount;
//     growing extends the file, refreshes the loop device's capacity and
//     resizes ext4 online, without a remount. The image is larger than
//     the volume's size by what ext4 keeps for itself (journal, inode
//     tables, the clusters it holds back): made (and grown) to an
//     estimate, then measured mounted and grown by any shortfall (at
//     most maxFitRounds times), so that statfs shows an unprivileged user
//     at least the size free; the room the volumes take of the root
//     (Promised, Footprinter) counts the whole image.
//
// Archiving (Archiver) keeps a volume instead of removing it: an image is
// unmounted, detached and renamed archived-<name>.img; a subvolume is
// renamed archived-<name>, keeping its qgroup and limit. The archive has
// its own record (state archived, its size, the volume it was), so it
// survives restarts and counts in Promised with all it may take, until
// Delete removes it or it is found removed by hand (its record is then
// dropped). archived-<name>-2, -3… up to maxArchives (100) when the name
// is taken.
//
// Snapshots and clones (Snapshotter, both backends): a snapshot is a
// point-in-time copy of a volume, kept under <root>/.snapshots/ (a hidden
// name: never a volume's or an archive's) with its own record under
// <state dir>/snapshots/ (kind snapshot: its name, the volume it is of
// and that volume's UID, its size, when it was taken, what it may take of
// the root, and creating, ready or deleting), so the list survives
// restarts. CreateFrom makes a volume with the content of a snapshot
// (restore) or of another volume (clone), at least the source's size:
//
//   - btrfs: a snapshot is a read-only subvolume snapshot (O(1)); a
//     restore or a clone is a writable snapshot of it, or of the volume,
//     with its own qgroup and limit. Snapshots are not recursive: a
//     subvolume a pod made inside the volume is an empty directory in the
//     snapshot and in every volume made from it.
//   - image: a snapshot is a copy of the volume's image taken while its
//     ext4 is frozen (FIFREEZE, thawed whatever happens, at the latest
//     at Config.Timeout: a copy that takes longer fails; a crash while
//     frozen is thawed by Recover); a reflink (FICLONE, O(1)) where the
//     root has them (btrfs, XFS), else a sparse copy (SEEK_DATA and
//     SEEK_HOLE: holes stay holes). A restore or a clone (of the frozen
//     volume) is such a copy, checked with e2fsck, given a new ext4 UUID
//     (tune2fs -U random: two mounted file systems with one UUID confuse
//     blkid, udev's by-uuid links and whatever mounts by UUID), grown to
//     its size and mounted like any volume.
//   - raw block volumes have neither (ErrBlockSnapshot): a device a pod
//     may be writing cannot be frozen by the agent, so no copy of it is
//     of one moment.
//
// Identity: every volume's record has a UID, and a snapshot's record
// names its source's; a volume made again under a deleted volume's name
// is another volume (a snapshot of the old one is not a snapshot of it:
// ErrExists), and a volume made from a snapshot records the snapshot's
// UID. A snapshot is not deleted (ErrSnapshotBusy) while a volume's
// record says it is being made from it, which holds across a crash until
// Recover has rolled that volume back. Snapshots and the volumes made
// from them do not depend on each other once made: either may be deleted
// first.
//
// What snapshots take of the root counts in Promised, under
// SnapshotKey(name), never over-committing: a btrfs snapshot may take the
// bytes its source referenced when it was taken (Snapshot.Bytes) less
// what it alone references already; a volume made from a snapshot or a
// clone counts only what it alone references as taken (what it shares is
// counted by its source), so it may still take its whole size. A sparse
// image copy has taken all it takes already; a reflinked one may still
// take all it allocates (Bytes), and a volume made by a reflink counts as
// taking nothing of its image yet.
//
// Adding a backend (XFS or ext4 project quotas, once a kernel with
// CONFIG_QUOTA can test it) is one file: a type with the driver methods
// (create, expand, attach, usage, remove), each idempotent, and a case in
// Open. The journal, the locking, the recovery and the name checks are
// shared and need nothing new; the record's ID field holds the backend's
// own identifier (a subvolume ID, a project ID).
//
// Crash safety: every change is written down first. A volume's record
// (<state dir>/<name>.json, written with fsync and an atomic rename) names
// the step under way — creating, expanding, deleting, archiving — before the driver
// acts, and says ready once it is done; a snapshot's record likewise
// (creating, deleting). Recover, run at start, reads the
// records: a creation that did not finish is rolled back (its caller never
// got a path, so nothing uses it), an expansion, a deletion or an
// archiving is finished,
// and a ready volume is made usable again (its loop device re-attached and
// mounted, and thawed if a snapshot cut short left it frozen); a snapshot
// being taken is rolled back, one being deleted is deleted, and a
// volume being made from a snapshot or a volume is rolled back like any
// creation. A SIGKILL anywhere thus leaves no orphan loop device, qgroup or
// image after Recover.
//
// Invariants:
//
//   - An existing image is never formatted again: blkid probes it first,
//     and only a file with no signature at all is given a file system.
//   - Sizes only grow; a smaller size is refused (ErrShrink).
//   - A loop device is found by its backing file before one is attached,
//     so a retry never attaches a second.
//   - Names are one path element (no "/", not "." or "..", not hidden, not
//     ending in ".img"), and every path is under the root resolved at
//     Open; external tools are run with argv, never a shell, each with a
//     deadline.
//   - Nothing here decides whether a volume is in use: callers must not
//     Delete a volume a pod has mounted.
//   - Only what has a record is touched: a subvolume, an image or a
//     directory under the root without one is left alone.
//
// Known limits: any user may create a nested subvolume inside a btrfs
// volume; it is limited with the volume from the next measurement (the
// agent's usage pass, within about 2 s: usage.Config.NestedPeriod; or
// Usage): what is written into it before counts then, and writes into
// several subvolumes of one volume at once may pass its size until that
// measurement; the volume is then over its size (writes fail with
// EDQUOT) until data is deleted, and /v1/pods shows the bytes. At most
// btrfs.MaxNested (256) are limited; past that the volume says its limit
// is not enforced. An image volume holds its size and a
// little more (the image is about 3 % larger at 10 GiB, 15 % at 50 MiB,
// 1.6 MiB more at 1 MiB). Growing a mounted ext4 needs
// CAP_SYS_RESOURCE; without it an expansion finishes offline when the
// volume is next attached unmounted (after a node restart).
package capacity
