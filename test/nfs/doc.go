// Package nfstest runs NFS servers in tests: Server is an NFSv3 server
// (go-nfs) in the test process, on loopback, serving a directory of the
// host read-write, MOUNT and NFS on one TCP port; Stop kills it as a dead
// server looks, Restart brings it back on the same port with the same
// file handles.
//
// The package must never change the host beyond the test's directories,
// and must leave no server goroutine behind once the test that started it
// has ended.
package nfstest
