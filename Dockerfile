# syntax=docker/dockerfile:1
# Build: a static binary, built as an unprivileged user.
FROM golang:1.26-bookworm AS build
RUN useradd --create-home builder
USER builder
WORKDIR /home/builder/src
COPY --chown=builder go.mod go.sum ./
RUN go mod download
COPY --chown=builder . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /home/builder/volume-agent ./cmd/volume-agent

# Runtime: debian-slim rather than distroless or scratch, because the agent
# mounts through mount(8)/umount(8) (util-linux, part of every Debian base),
# NFS volumes need nfs-common's mount.nfs, and local PVs on block devices
# need blkid (util-linux) and mkfs.ext4 (e2fsprogs) to format an empty
# device. btrfs-progs brings btrfs(8), which the agent runs on a node whose
# root directory or --local-path-root is on btrfs with quotas on: a disk
# emptyDir with a sizeLimit and an enforced claim's volume are subvolumes
# limited by their qgroups, and their usage is read from those qgroups;
# without btrfs(8) they would be plain directories with nothing to enforce
# their sizes, and an enforced class would be refused. It runs as root:
# mounting needs CAP_SYS_ADMIN (the DaemonSet makes it privileged).
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends nfs-common e2fsprogs btrfs-progs \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /home/builder/volume-agent /usr/local/bin/volume-agent
ENTRYPOINT ["/usr/local/bin/volume-agent"]
