#!/bin/sh
# write.sh [MIB] [DIR]: sequential write throughput of an image volume (a
# sparse ext4 image on a loop device with direct I/O, made as the capacity
# backend makes one) against a plain directory of the same file system:
# dd of MIB MiB (default 512) in 1 MiB blocks with conv=fsync, three times
# each, dropping the page cache before each run. DIR (default /var/tmp)
# holds both. Needs root, losetup, mkfs.ext4.
set -eu
mib=${1:-512} base=${2:-/var/tmp}
work=$(mktemp -d "$base/write.XXXXXX")
dev=
cleanup() {
	umount "$work/image" 2>/dev/null || true
	[ -z "$dev" ] || losetup -d "$dev"
	rm -rf "$work"
}
trap cleanup EXIT
truncate -s $((mib * 2))M "$work/vol.img"
mkfs.ext4 -F -q -m 0 -E lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=0:0 "$work/vol.img"
dev=$(losetup --find --show --direct-io=on "$work/vol.img")
mkdir "$work/image" "$work/plain"
mount -t ext4 "$dev" "$work/image"
for kind in plain image plain image plain image; do
	rm -f "$work/$kind/f"
	sync
	echo 3 > /proc/sys/vm/drop_caches
	printf '%s ' "$kind"
	dd if=/dev/zero of="$work/$kind/f" bs=1M count="$mib" conv=fsync 2>&1 | tail -n 1
done
