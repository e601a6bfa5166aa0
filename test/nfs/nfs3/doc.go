// Package nfs3 is a small NFSv3 client (RFC 1813) over TCP, for the test
// mount helper in test/nfs/mountnfs. It owns one reconnecting connection
// to one server and the NFS and MOUNT procedures a file system needs, by
// file handle.
//
// It takes the protocol's types and XDR codec from
// github.com/willscott/go-nfs-client but not that module's RPC client or
// its path-based Target, because the helper needs what they lack:
//
//   - a bound on every call: a call ends when its context does, and go-nfs-
//     client's Call retries up to 100 times, five seconds each;
//   - reconnection without races: its reader can block for good on a reply
//     that arrives as the call times out, and can close a reply channel
//     twice;
//   - IPv6 servers ("[::1]:port"), a port given by the caller instead of
//     the portmapper, and no privileged source port;
//   - procedures by file handle (LOOKUP, READDIRPLUS, ...), where Target
//     walks a path from the root for every call.
//
// Calls are retransmitted on a new connection when the old one breaks or
// stops answering, with the same XID, until a reply comes or the context
// ends: as with a hard NFS mount, a caller that wants a soft one gives the
// context a deadline. Like any NFSv3 client without a duplicate request
// cache on the server, a retransmitted CREATE or REMOVE may fail with
// EEXIST or ENOENT although it took effect.
//
// The package must never retry forever on its own, nor keep a goroutine
// after Close.
package nfs3
