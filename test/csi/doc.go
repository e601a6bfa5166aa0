// Package csi supplies end-to-end tests with the Kubernetes CSI ecosystem's
// own programs, built from the Go module proxy as test/controlplane builds
// the control plane: csi-provisioner, csi-resizer, csi-snapshotter and the
// snapshot-controller (external-provisioner v6, external-resizer v2,
// external-snapshotter v8), their images for test/node, and the
// VolumeSnapshot CRDs of external-snapshotter's client module.
//
// The programs are built from one helper module (sidecars/, a module of its
// own so that the main module's `go test ./...` never descends into it),
// once, into a cache keyed by its go.mod and go.sum; the CRDs are read from
// the Go module cache, where the go command verified them against that
// go.sum. Nothing here is copied from upstream into this repository, and
// nothing here ever pulls an image: the images are built in Go and imported
// into the test node.
//
// Binaries are plain upstream code: this package only builds, packages and
// starts them. It must never patch them or stand in for them with fakes.
package csi
