// Package atomicwriter writes the content of configMap, secret, downwardAPI
// and projected volumes into a volume directory, so that a reader in a
// container sees either the complete old payload or the complete new one,
// never a mix and never a partial file.
//
// # What it owns
//
// Inside the volume directory it owns exactly these entries, in the
// kubelet's on-disk layout:
//
//	..2026_11_22_04_05_06.123456789/   the current payload, a fresh directory per write
//	..data -> ..2026_11_22_04_05_06.123456789
//	..data_tmp                         transient: the next ..data, renamed over it
//	key1 -> ..data/key1                one relative symlink per top-level name
//	dir  -> ..data/dir                 nested paths live inside the payload directory
//
// A write builds the whole new payload in a new timestamped directory, then
// switches ..data to it with one rename(2) of ..data_tmp, then adds and
// removes top-level links, then removes the previous timestamped directory
// and any left over by a crash. A write of an unchanged payload skips the new
// directory and the switch but runs the same clean-up, so it finishes one that
// a crash cut short.
//
// # What it must never do
//
//   - Follow a symlink out of the volume directory. A container may replace
//     anything inside a writable volume with a symlink to the host
//     (CVE-2017-1002102), and the agent runs as root. Every operation goes
//     through an *os.Root opened on the volume directory, files are created
//     with O_EXCL and chmod'ed and chown'ed through their open descriptor, and
//     removal unlinks symlinks instead of following them. The one exception
//     is WriteNew's fresh write into a directory its caller has just created
//     (or a tmpfs it has just mounted) and that it finds empty: it works
//     through a descriptor of the directory with raw system calls, every
//     entry created with O_EXCL semantics (openat2 O_EXCL refusing any
//     symlink on the way, mkdirat, symlinkat), so that what it did not make
//     is never followed nor overwritten; any error, or a directory that is
//     not empty, sends it back to Write.
//   - Remove anything it did not create: only ..data, ..data_tmp, top-level
//     symlinks of the form name -> ..data/name and directories whose name has
//     the timestamp form are ever removed. A file or directory a container
//     created at a payload's top-level name fails the write (ErrCollision).
//   - Put file content into an error: payloads carry secrets.
//   - Leave a half-written payload visible: a failed write removes its new
//     directory and leaves ..data, and so every link, on the old payload.
//
// One Writer serialises its own writes; two Writers must not write the same
// directory at the same time.
package atomicwriter
