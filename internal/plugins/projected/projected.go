// Package projected implements projected volumes: configMap, secret,
// downwardAPI and serviceAccountToken sources merged into one directory on
// a tmpfs (it may hold secrets and tokens), written with the atomic writer
// and refreshed when any source changes. Two sources writing the same path
// is an error.
package projected

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/contentdir"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Name is the plugin's kubelet name.
const Name = "kubernetes.io/projected"

// Tokens mints service account tokens for serviceAccountToken sources.
type Tokens interface {
	// Token returns a token for the pod's service account. current is the
	// token the volume holds at the source's path (nil when none), which
	// Token returns as it is while it is fresh, so that a restart rewrites
	// nothing.
	Token(ctx context.Context, pod *v1.Pod, src *v1.ServiceAccountTokenProjection, current []byte) ([]byte, error)
	// Version changes whenever Token would return a different token.
	Version(pod *v1.Pod, src *v1.ServiceAccountTokenProjection) string
}

// Plugin sets up projected volumes.
type Plugin struct {
	Mounter mount.Mounter
	// Tokens is nil when tokens are not minted (--mint-tokens=false, or no
	// API server): volumes with serviceAccountToken sources then fail
	// validation.
	Tokens Tokens
	// NoSwap mounts the tmpfs with noswap (the kernel supports it).
	NoSwap bool
}

var (
	_ volume.Plugin    = (*Plugin)(nil)
	_ volume.Versioner = (*Plugin)(nil)
	_ volume.Validator = (*Plugin)(nil)
)

// Name implements volume.Plugin.
func (p *Plugin) Name() string { return Name }

// CanSupport implements volume.Plugin.
func (p *Plugin) CanSupport(v *v1.Volume) bool { return v.Projected != nil }

// SetUp writes the merged sources into dir, on a tmpfs.
func (p *Plugin) SetUp(ctx context.Context, spec *volume.Spec, dir string) (volume.Result, error) {
	payload, err := p.payload(ctx, spec, dir)
	if err != nil {
		return volume.Result{}, err
	}
	return p.dir().Publish(ctx, spec, dir, payload)
}

// TearDown unmounts the tmpfs and removes the directory.
func (p *Plugin) TearDown(ctx context.Context, dir string) error {
	return p.dir().TearDown(ctx, dir)
}

func (p *Plugin) dir() contentdir.Dir {
	return contentdir.Dir{Mounter: p.Mounter, Memory: true, NoSwap: p.NoSwap}
}

// payload merges every source's files; a path written twice is an error.
// dir is the volume directory, where tokens written before are read back.
func (p *Plugin) payload(ctx context.Context, spec *volume.Spec, dir string) (contentdir.Payload, error) {
	merged := contentdir.Payload{}
	owner := map[string]int{}
	for i := range spec.Volume.Projected.Sources {
		files, err := p.sourcePayload(ctx, spec, i, dir)
		if err != nil {
			return nil, fmt.Errorf("projected.sources[%d]: %w", i, err)
		}
		for path, f := range files {
			if j, dup := owner[path]; dup {
				return nil, fmt.Errorf("projected.sources[%d] and projected.sources[%d] both write %q", j, i, path)
			}
			owner[path] = i
			merged[path] = f
		}
	}
	return merged, nil
}
