// Package node runs a real Kubernetes node for end-to-end tests: the
// kubelet (built by test/controlplane from the Go module proxy), containerd,
// runc and the CNI plugins from Debian's packages, registered with a
// control plane of test/controlplane.
//
// It owns three things: fetching the Debian packages into a per-user cache
// (apt-get download and dpkg -x; nothing is installed system-wide), building
// OCI images in Go without a container engine (the agent image, and a tiny
// image used as workload and as containerd's sandbox image), and the
// lifetime of the node.
//
// The whole node runs in a mount namespace and a PID namespace of its own.
// In the mount namespace / is made rshared (containerd refuses Bidirectional
// and HostToContainer propagation otherwise) and per-test directories are
// bind-mounted over /var/lib, /var/log and /run, so that the node's state
// (kubelet, containerd, CNI, /var/lib/volume-agent) starts empty and never
// touches the host's. The host's own mount table is never changed. When the
// test ends the PID namespace's init is killed, which kills every process of
// the node, containers included, and the mount namespace goes with them.
//
// The node shares the host's network namespace (the kubelet and the
// hostNetwork agent reach the loopback control plane); pods that are not
// hostNetwork get a network namespace with only a loopback interface, so the
// host's network configuration is not changed either.
package node
