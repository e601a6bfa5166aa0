// Package mount is the one audited place where volume-agent mounts,
// unmounts and removes directories that may hold mounts.
//
// A mount is a plain value (type, source, options) performed by Mounter.
// Every call takes a context: storage that stops answering (a hung NFS
// server) must never block the caller past its deadline. When a deadline
// passes, the call returns ctx.Err() and the stuck system call is left to
// finish on its own goroutine; the caller treats the outcome as uncertain.
//
// Arguments that come from user input are passed to mount(8) as separate
// argv elements after "--", so a source or target starting with "-" is never
// read as an option. RemoveAll never follows a symlink and never descends
// into a mount point: it refuses to remove a tree that has a mount below it.
package mount
