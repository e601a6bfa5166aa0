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
# device. It runs as root: mounting needs CAP_SYS_ADMIN (the DaemonSet makes
# it privileged).
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends nfs-common e2fsprogs \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /home/builder/volume-agent /usr/local/bin/volume-agent
ENTRYPOINT ["/usr/local/bin/volume-agent"]
