// Package btrfs is the agent's one use of btrfs(8) and of btrfs's on-disk
// facts: telling a subvolume from a plain directory, whether quotas are on,
// making and deleting subvolumes, setting a qgroup limit, destroying a
// qgroup, and reading a subvolume's qgroup (the bytes it references and
// holds alone, and its limit) from `btrfs qgroup show --raw`.
//
// Its users decide what a subvolume is for: plugins/emptydir makes a disk
// emptyDir with a sizeLimit one, provisioner/capacity makes each enforced
// volume one (and journals every step), usage measures one by its qgroup.
//
// Every run of btrfs(8) goes through Tool.Run: argv only, never a shell;
// killed at Tool.Timeout or ctx's end, whichever comes first, and given up
// on like a stuck mount (mount.Bounded), so a btrfs(8) stuck in the kernel
// never holds its caller. A failure is an *Error carrying the command and
// what btrfs(8) said; the categories callers branch on are sentinels
// (ErrQuotasOff, ErrNotEmpty) matched with errors.Is.
//
// It must never hand btrfs(8) a relative path (one starting with "-"
// would read as an option, and btrfs(8) does not take "--" everywhere):
// every method refuses one. It decides nothing: it turns quotas on, makes
// or deletes only when told to, and keeps no state.
package btrfs
