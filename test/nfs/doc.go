// Package nfstest runs NFS mounts in tests on machines whose kernel has no
// NFS client but has FUSE, over a real NFSv3 connection:
//
//   - Server is an NFSv3 server (go-nfs) in the test process, on loopback,
//     serving a directory of the host read-write, MOUNT and NFS on one TCP
//     port; Stop kills it as a dead server looks, Restart brings it back
//     on the same port with the same file handles.
//   - Namespace is a private mount namespace in which /sbin/mount.nfs is a
//     test helper (test/nfs/mountnfs, built by BuildMountHelper) that
//     mounts the export through FUSE with a userspace NFSv3 client. So
//     util-linux's `mount -t nfs SERVER:/PATH DIR -o port=P,mountport=P`
//     inside the namespace — the agent's own mount path — reaches the
//     server, and the agent's production code stays unchanged.
//
// An end-to-end test builds the helper next to the agent in TestMain, then
// runs the agent inside a namespace and looks from outside:
//
//	helper, err := nfstest.BuildMountHelper(binDir) // in TestMain
//
//	root, export := t.TempDir(), t.TempDir() // before the namespace: see below
//	ns := nfstest.NewNamespace(t, helper)
//	srv := nfstest.Start(t, export)
//	// A PersistentVolume with nfs: {server: "127.0.0.1", path: "/"} and
//	// mountOptions from srv.MountOptions("soft", "timeo=10", "retrans=1").
//	agent := ns.Command(agentBinary, "--root-dir", root, ...)
//	agent.Start() // its mount(8) runs the helper
//	m, ok := ns.Mount(volumeDir)           // the namespace's mount table
//	b, err := os.ReadFile(ns.Path(volumeDir + "/file")) // through the mount
//	srv.Stop()    // the volume fails or turns uncertain...
//	srv.Restart() // ...and heals
//
// Cleanups run last-in first-out: directories made before NewNamespace
// outlive it, and an agent started after it is stopped before the
// namespace ends. The host never sees the namespace's mounts, so test
// code reads them only through Path, and a hard mount of a dead server
// blocks whoever reads it (use soft, or a child process, for that).
//
// The package must never change the host: no mount outside a namespace it
// created, nothing written but under the test's directories. And it must
// leave nothing behind once the test that started it has ended: no server
// goroutine, no helper process, no namespace, no mount. Mounts made inside
// a namespace are invisible to the host and vanish with it.
//
// Tests should not assert that a mount's file system type is "nfs": here
// it is "fuse.nfs-test". Its source is the remote target, as for NFS.
package nfstest
