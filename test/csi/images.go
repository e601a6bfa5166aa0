package csi

import (
	"path/filepath"
	"testing"

	"github.com/volume-agent/volume-agent/test/node"
)

// ImageRef is the reference of b's image. The registry does not exist:
// test/node imports the images into containerd and nothing pulls them (a
// tag other than latest makes the kubelet's default pull policy
// IfNotPresent).
func ImageRef(b Binary) string { return "localhost/" + b.Name + ":test" }

// EntrypointOf is where b's image holds the program, its ENTRYPOINT: at
// the root, named after it, as in the upstream images
// (registry.k8s.io/sig-storage/csi-provisioner runs /csi-provisioner), so
// a manifest's args fit both.
func EntrypointOf(b Binary) string { return "/" + b.Name }

// Images builds (or reuses) the programs and returns an image of each of
// bins (all four when none is named) by ImageRef, ready for test/node's
// Options.Images:
//
//	n := node.Start(t, cp, node.Options{Images: csi.Images(t)})
//
// Each image is one uncompressed layer of about 75 MB, which containerd
// imports in a few seconds: name only the ones the node runs.
func Images(t testing.TB, bins ...Binary) map[string]node.Image {
	t.Helper()
	if len(bins) == 0 {
		bins = All
	}
	dir := Binaries(t)
	images := map[string]node.Image{}
	for _, b := range bins {
		img, err := node.BuildStaticImage(filepath.Join(dir, b.Name), EntrypointOf(b))
		if err != nil {
			t.Fatalf("csi: image of %s: %v", b.Name, err)
		}
		images[ImageRef(b)] = img
	}
	return images
}
