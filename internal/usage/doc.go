// Package usage measures how much space and how many inodes each volume
// of the node uses: the emptyDir volumes and the claims' volumes of the
// pods in the desired state that are set up.
//
// A volume that is its own file system (a tmpfs, a loop image, an NFS
// export: its directory is a mount point showing its file system's root)
// is measured by statfs, O(1). A btrfs subvolume whose qgroup has a limit
// (an enforced claim's or a sizeLimit emptyDir's on btrfs), seen directly
// or through a bind mount, is measured by its qgroup: one run of btrfs
// qgroup show, bounded like a statfs. One the agent limits (a Target with
// a QuotaLimit) is measured by the qgroups of its subvolume and of every
// subvolume made inside it, after their limits are made again where
// missing (btrfs.Tool.Enforce: a tree search per nested subvolume, never
// a walk; a volume holding nested subvolumes every NestedPeriod, so that
// the room they share is given out again); where they cannot be (quotas
// off), the
// measurement says why (NotEnforced), and the volume is walked with its
// size limit watched, until a later measurement makes them again. Only a plain directory (or a
// subvolume without a limit) is walked, du-style:
// st_blocks*512 bytes and one inode per entry, a hard-linked file once per
// walk. How a volume is measured is decided once while it stays as it was
// (probe). New volumes are first measured at one of the next six points
// of a grid of Period/6, at random, so that a restart causes no storm of
// walks; from their second measurement all volumes are due together, at
// the points epoch+k*Period. The volumes due at one point are measured in
// one pass, one after the other, by one worker goroutine that Run watches
// (pass.go), each at most once per period; the walks of a pass read at
// most Config.EntriesPerSecond entries a second together. At rest Run
// wakes once a period for that pass, and every NestedPeriod only while
// some volume has a limit the agent enforces.
//
// A target may carry a size limit that nothing else enforces (a disk
// emptyDir's sizeLimit): a measurement above it is Exceeded, and the
// Reporter is told once per crossing, when a measurement above the limit
// follows one below it or none. Reporting is all it does: it never stops
// a pod or removes data.
//
// It must never: follow a symlink (the volume is pod-writable: a walk goes
// through file descriptors, openat and statx with AT_SYMLINK_NOFOLLOW);
// cross a mount point (told by mount ID); walk network storage; or block
// on a hung file system (every call that touches storage is bounded, a
// walk that stops making progress is abandoned, the pass going on with
// the other volumes on a new worker, and a volume whose last call has not
// returned is not asked again). It runs beside set-up and
// teardown, never on their path, and changes nothing on disk.
package usage
