package node

import (
	"fmt"
	"path/filepath"
)

// containerdConfig is containerd 1.6's configuration (format version 2):
// its state in the usual places (which are the node's own directories in
// its mount namespace), runc from the package cache, the CNI plugins in
// cniBinDir (containerd adds the loopback network itself),
// and the imported pause image as the sandbox image so that nothing is ever
// pulled.
func containerdConfig(runtimeRoot, cniBinDir, cniConfDir string) string {
	return fmt.Sprintf(`version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = %[1]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[2]q
  # Lowering a process's oom_score_adj needs CAP_SYS_RESOURCE, which test
  # machines in containers often lack: clamp to containerd's own score
  # (the kubelet asks -998 for every sandbox).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %[3]q
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[4]q
    conf_dir = %[5]q
`, containerdSocket, PauseImageRef, filepath.Join(runtimeRoot, "usr/sbin/runc"),
		cniBinDir, cniConfDir)
}

// containerdSocket is containerd's socket inside the node's namespace.
const containerdSocket = "/run/containerd/containerd.sock"

// cniConfig runs cniPlugin for pods that are not hostNetwork.
const cniConfig = `{
  "cniVersion": "0.4.0",
  "name": "pod-veth",
  "plugins": [{"type": "pod-veth"}]
}
`

// cniPlugin is a CNI plugin that gives a pod a network namespace of its
// own with an interface and an address (containerd wants one) and nothing
// else: both ends of a veth pair stay inside the pod's namespace, so no
// bridge, route or sysctl of the host changes (the bridge and ptp plugins
// would turn on the host's IP forwarding). Every pod gets the same
// address; nothing here needs pod-to-pod traffic. The namespace and the
// pair go away with the sandbox, so DEL has nothing to do.
const cniPlugin = `#!/bin/sh
set -e
in_pod() { nsenter --net="$CNI_NETNS" -- "$@"; }
case "$CNI_COMMAND" in
ADD)
  in_pod ip link add "$CNI_IFNAME" type veth peer name peer0
  in_pod ip addr add 10.244.0.2/32 dev "$CNI_IFNAME"
  in_pod ip link set peer0 up
  in_pod ip link set "$CNI_IFNAME" up
  printf '{"cniVersion":"0.4.0","interfaces":[{"name":"%s","sandbox":"%s"}],"ips":[{"version":"4","address":"10.244.0.2/32","interface":0}]}' "$CNI_IFNAME" "$CNI_NETNS"
  ;;
VERSION)
  printf '{"cniVersion":"0.4.0","supportedVersions":["0.3.0","0.3.1","0.4.0"]}'
  ;;
esac
`

// kubeletConfig is the kubelet's configuration file.
//
// cgroups: this machine (like many CI containers) has cgroup v1, which the
// kubelet v1.36 refuses unless failCgroupV1 is false. The driver is
// cgroupfs: there is no systemd to delegate to. cgroupsPerQOS stays on,
// under a cgroupRoot of the node's own (created by createCgroupRoot and
// removed at the end), so that every pod's cgroup, with its memory limit,
// lives under it as on a real node, and nothing is left in the host's
// cgroup tree. enforceNodeAllocatable is empty: the test node reserves
// nothing for system daemons, and the kubelet then puts no limit on
// kubepods.
//
// Eviction and image garbage collection are off: a CI machine's nearly
// full disk must not evict the agent or delete the imported images, which
// cannot be pulled again. Authentication of the kubelet's own API is by
// client certificate of the cluster CA only (Node.KubeletGet).
func kubeletConfig(port, healthzPort int, caFile, cgroupRoot string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: true
cgroupRoot: %[5]q
enforceNodeAllocatable: []
containerRuntimeEndpoint: unix://%[1]s
address: 127.0.0.1
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %[4]q}
authorization: {mode: AlwaysAllow}
failSwapOn: false
resolvConf: ""
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
nodeStatusUpdateFrequency: 2s
`, containerdSocket, port, healthzPort, caFile, cgroupRoot)
}
