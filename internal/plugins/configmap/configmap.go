// Package configmap implements configMap volumes: the keys of a ConfigMap
// written as files with the atomic writer, refreshed when the ConfigMap
// changes. The content is never logged or put into an error.
package configmap

import (
	"context"
	"errors"
	"os"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/contentdir"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Name is the plugin's kubelet name.
const Name = "kubernetes.io/configmap"

// Plugin sets up configMap volumes (on disk, as the kubelet does).
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
func (p *Plugin) CanSupport(v *v1.Volume) bool { return v.ConfigMap != nil }

// Validate checks the name, items and modes.
func (p *Plugin) Validate(spec *volume.Spec) error {
	src := spec.Volume.ConfigMap
	if src.Name == "" {
		return errors.New("configMap.name is required")
	}
	return contentdir.ValidateItems("configMap", src.Items, src.DefaultMode)
}

// ContentVersion is the ConfigMap's uid@resourceVersion, or "absent".
func (p *Plugin) ContentVersion(spec *volume.Spec) (string, error) {
	return contentdir.ObjectVersion(spec.Objects.ConfigMap(spec.Pod.Namespace, spec.Volume.ConfigMap.Name))
}

// SetUp writes the ConfigMap's content into dir.
func (p *Plugin) SetUp(ctx context.Context, spec *volume.Spec, dir string) (volume.Result, error) {
	src := spec.Volume.ConfigMap
	payload, err := Lookup(spec, src.Name, src.Items, contentdir.Mode(src.DefaultMode), optional(src.Optional))
	if err != nil {
		return volume.Result{}, err
	}
	return contentdir.Dir{Mounter: p.Mounter}.Publish(ctx, spec, dir, payload)
}

// Lookup finds the pod's ConfigMap name and returns its payload.
func Lookup(spec *volume.Spec, name string, items []v1.KeyToPath, mode os.FileMode, optional bool) (contentdir.Payload, error) {
	ns := spec.Pod.Namespace
	cm, err := spec.Objects.ConfigMap(ns, name)
	if cm, err = contentdir.Existing(cm, err, "configMap "+ns+"/"+name); err != nil {
		return nil, err
	}
	return Payload(ns, name, cm, items, mode, optional)
}

// TearDown removes the directory.
func (p *Plugin) TearDown(ctx context.Context, dir string) error {
	return contentdir.Dir{Mounter: p.Mounter}.TearDown(ctx, dir)
}

func optional(b *bool) bool { return b != nil && *b }
