// Package downwardapi implements downwardAPI volumes: pod metadata (name,
// namespace, uid, labels, annotations) and container resource fields written
// as files with the atomic writer, refreshed when labels or annotations
// change.
package downwardapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sort"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/contentdir"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Name is the plugin's kubelet name.
const Name = "kubernetes.io/downward-api"

// Plugin sets up downwardAPI volumes (on disk, as the kubelet does).
type Plugin struct {
	Mounter mount.Mounter
}

var (
	_ volume.Plugin    = (*Plugin)(nil)
	_ volume.Versioner = (*Plugin)(nil)
	_ volume.Validator = (*Plugin)(nil)
)

// Name implements volume.Plugin.
func (p *Plugin) Name() string { return Name }

// CanSupport implements volume.Plugin.
func (p *Plugin) CanSupport(v *v1.Volume) bool { return v.DownwardAPI != nil }

// Validate checks every item's path, mode and field.
func (p *Plugin) Validate(spec *volume.Spec) error {
	src := spec.Volume.DownwardAPI
	return ValidateItems("downwardAPI", spec.Pod, src.Items, src.DefaultMode)
}

// ContentVersion is a hash of the content: it changes exactly when a file
// would change.
func (p *Plugin) ContentVersion(spec *volume.Spec) (string, error) {
	payload, err := p.payload(spec)
	if err != nil {
		return "", err
	}
	return Hash(payload), nil
}

// SetUp writes the fields into dir.
func (p *Plugin) SetUp(ctx context.Context, spec *volume.Spec, dir string) (volume.Result, error) {
	payload, err := p.payload(spec)
	if err != nil {
		return volume.Result{}, err
	}
	return contentdir.Dir{Mounter: p.Mounter}.Publish(ctx, spec, dir, payload)
}

// TearDown removes the directory.
func (p *Plugin) TearDown(ctx context.Context, dir string) error {
	return contentdir.Dir{Mounter: p.Mounter}.TearDown(ctx, dir)
}

func (p *Plugin) payload(spec *volume.Spec) (contentdir.Payload, error) {
	src := spec.Volume.DownwardAPI
	return Payload(spec.Pod, Allocatable(spec.Node), src.Items, contentdir.Mode(src.DefaultMode))
}

// Allocatable is what a container may use when it sets no limit: the node's
// allocatable when known, else this machine's capacity.
func Allocatable(node *v1.Node) v1.ResourceList {
	if node != nil && len(node.Status.Allocatable) > 0 {
		return node.Status.Allocatable
	}
	return MachineCapacity()
}

// Hash returns a short digest of a payload's paths, modes and content.
func Hash(payload contentdir.Payload) string {
	paths := make([]string, 0, len(payload))
	for path := range payload {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	h := sha256.New()
	for _, path := range paths {
		f := payload[path]
		h.Write([]byte(path))
		h.Write([]byte{0, byte(f.Mode >> 8), byte(f.Mode), 0}) //nolint:gosec // G115: the low two bytes of the mode, for a hash
		h.Write(f.Data)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}
