// Package subpath prepares the subPath mounts of a pod's containers, as the
// kubelet does (pkg/volume/util/subpath): for every volumeMount with a
// subPath or subPathExpr of an init or regular container, once the volume is
// set up, the agent opens the subPath from the volume's descriptor, with
// the kernel refusing any resolution that leaves the volume (a symlink is
// followed only while it stays inside, as the kubelet allows; a missing
// subPath is made one element at a time, through no symlink at all), and
// bind-mounts what it opened, by descriptor, onto
//
//	<root>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>
//
// where index is the mount's index in the container's volumeMounts. A
// runtime mounts that path into the container instead of joining the
// volume's path with the subPath itself, which a container could redirect
// with a symlink (CVE-2017-1002101) or a symlink swapped in after the check
// (CVE-2021-25741).
//
// Wanted (pure) lists and checks the subPaths a pod wants; Preparer makes,
// checks again after a restart, and removes the mounts. Preparer works
// through file descriptors inside volumes (which pods write) and never
// removes anything through a mount: a target is unmounted, then removed
// only when it is the empty directory or file the agent made.
package subpath
