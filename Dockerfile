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
# mounts through mount(8)/umount(8) (util-linux, part of every Debian base;
# NFS support will add nfs-common's mount.nfs). It runs as root: mounting
# needs CAP_SYS_ADMIN (the DaemonSet makes it privileged).
FROM debian:bookworm-slim
COPY --from=build /home/builder/volume-agent /usr/local/bin/volume-agent
ENTRYPOINT ["/usr/local/bin/volume-agent"]
