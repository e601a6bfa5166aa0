// Package secret implements secret volumes: the keys of a Secret written as
// files with the atomic writer on a tmpfs (with noswap where the kernel has
// it), so that secrets never reach the node's disk or swap, and refreshed
// when the Secret changes. Secret content is
// never logged, put into an error or served.
package secret

import (
	"context"
	"errors"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/contentdir"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Name is the plugin's kubelet name.
const Name = "kubernetes.io/secret"

// Plugin sets up secret volumes.
type Plugin struct {
	Mounter mount.Mounter
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
func (p *Plugin) CanSupport(v *v1.Volume) bool { return v.Secret != nil }

// Validate checks the name, items and modes.
func (p *Plugin) Validate(spec *volume.Spec) error {
	src := spec.Volume.Secret
	if src.SecretName == "" {
		return errors.New("secret.secretName is required")
	}
	return contentdir.ValidateItems("secret", src.Items, src.DefaultMode)
}

// ContentVersion is the Secret's uid@resourceVersion, or "absent".
func (p *Plugin) ContentVersion(spec *volume.Spec) (string, error) {
	return contentdir.ObjectVersion(spec.Objects.Secret(spec.Pod.Namespace, spec.Volume.Secret.SecretName))
}

// SetUp writes the Secret's content into dir, on a tmpfs.
func (p *Plugin) SetUp(ctx context.Context, spec *volume.Spec, dir string) (volume.Result, error) {
	src := spec.Volume.Secret
	payload, err := Lookup(spec, src.SecretName, src.Items, contentdir.Mode(src.DefaultMode), src.Optional != nil && *src.Optional)
	if err != nil {
		return volume.Result{}, err
	}
	return p.dir().Publish(ctx, spec, dir, payload)
}

// Lookup finds the pod's Secret name and returns its payload.
func Lookup(spec *volume.Spec, name string, items []v1.KeyToPath, mode os.FileMode, optional bool) (contentdir.Payload, error) {
	ns := spec.Pod.Namespace
	s, err := spec.Objects.Secret(ns, name)
	if s, err = contentdir.Existing(s, err, "secret "+ns+"/"+name); err != nil {
		return nil, err
	}
	return Payload(ns, name, s, items, mode, optional)
}

// TearDown unmounts the tmpfs and removes the directory.
func (p *Plugin) TearDown(ctx context.Context, dir string) error {
	return p.dir().TearDown(ctx, dir)
}

func (p *Plugin) dir() contentdir.Dir {
	return contentdir.Dir{Mounter: p.Mounter, Memory: true, NoSwap: p.NoSwap}
}

// Payload returns the files a Secret projects: every key, or only the listed
// items at their paths. s is nil when the Secret does not exist: that gives
// an empty payload when optional and an error otherwise.
func Payload(namespace, name string, s *v1.Secret, items []v1.KeyToPath, mode os.FileMode, optional bool) (contentdir.Payload, error) {
	what := fmt.Sprintf("secret %s/%s", namespace, name)
	if s == nil {
		if optional {
			return contentdir.Payload{}, nil
		}
		return nil, fmt.Errorf("%s not found", what)
	}
	return contentdir.Project(what, s.Data, items, mode, optional)
}
