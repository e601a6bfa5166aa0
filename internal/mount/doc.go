// Package mount is the one audited place where volume-agent mounts,
// unmounts and removes directories that may hold mounts.
//
// A mount is a plain value (type, source, options) performed by Mounter.
// Every call takes a context: storage that stops answering (a hung NFS
// server) must never block the caller past its deadline. When a deadline
// passes, the call returns ctx.Err() and the stuck system call is left to
// finish on its own goroutine; the caller treats the outcome as uncertain.
//
// A tmpfs takes noswap (Linux 6.4 and later) when ProbeNoSwap has found
// the kernel supports it; NoSwapUnder reads, once at start, which mounted
// tmpfs have it.
//
// A tmpfs or a bind mount is made with mount(2) and every mount is taken
// off with umount2(2), as containerd does: no process is started, and an
// option mount(2) would drop is refused, not ignored. Types that need a
// helper (nfs) or device handling go through mount(8), their user input as
// separate argv elements after "--", so a source or target starting with
// "-" is never read as an option.
//
// Mount points are told apart by mount ID (statx), never by device number,
// and without reading the kernel's mount table, so that no call costs more
// on a node with many mounts. RemoveAll never follows a symlink and never
// descends into a mount point: it refuses to remove a tree that has a
// mount below it.
package mount
