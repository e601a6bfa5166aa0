#!/usr/bin/env bash
# Installs the system tools the tests need, from Debian's packages, when they
# are missing: `make test` runs it before the tests, on a fresh machine as
# in CI. Nothing is installed that is already there; without root, or
# without apt-get, it says what to install and the tests that need a
# missing tool skip or fail saying which.
set -euo pipefail

# tool -> the Debian package that ships it.
#   mount, umount        the agent mounts NFS and devices through mount(8)
#   losetup, blkid,      local PVs on loop devices, formatted when empty;
#   mkfs.ext4            the NFS tests enter mount namespaces (unshare,
#   nsenter, unshare     nsenter)
#   mount.nfs            the NFS tests bind a test helper over it inside a
#                        private namespace, and the image tests copy it
#   chattr               claims' tests make a file immutable to stop a
#                        deletion half way
#   ip                   the real-node test's CNI plugin
#   btrfs, mkfs.btrfs    capacity's tests make a loop-backed btrfs with
#   resize2fs, e2fsck    quotas; its image volumes grow ext4 (online)
#   strace               the benchmark's -syscalls counts the agent's system calls
declare -A packages=(
  [mount]=mount [umount]=mount
  [losetup]=util-linux [blkid]=util-linux [nsenter]=util-linux [unshare]=util-linux
  [mkfs.ext4]=e2fsprogs [chattr]=e2fsprogs [resize2fs]=e2fsprogs [e2fsck]=e2fsprogs
  [btrfs]=btrfs-progs [mkfs.btrfs]=btrfs-progs
  [mount.nfs]=nfs-common
  [ip]=iproute2
  [strace]=strace
)

missing=()
for tool in "${!packages[@]}"; do
  if ! command -v "$tool" >/dev/null 2>&1 && [ ! -e "/sbin/$tool" ] && [ ! -e "/usr/sbin/$tool" ]; then
    missing+=("${packages[$tool]}")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "test/deps.sh: missing packages: ${missing[*]}; install them (apt-get install ${missing[*]}) as root" >&2
  exit 0
fi
echo "test/deps.sh: installing ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
