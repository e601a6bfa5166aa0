// Package configmap implements configMap volumes: the keys of a ConfigMap
// written as files with the atomic writer, refreshed when the ConfigMap
// changes. The content is never logged or put into an error.
package configmap

import (
	"context"
	"errors"
	"fmt"

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

// ContentVersion is the ConfigMap's resourceVersion, or "absent".
func (p *Plugin) ContentVersion(spec *volume.Spec) (string, error) {
	cm, err := spec.Objects.ConfigMap(spec.Pod.Namespace, spec.Volume.ConfigMap.Name)
	return objectVersion(cm, err)
}

// SetUp writes the ConfigMap's content into dir.
func (p *Plugin) SetUp(ctx context.Context, spec *volume.Spec, dir string) (volume.Result, error) {
	src := spec.Volume.ConfigMap
	cm, err := spec.Objects.ConfigMap(spec.Pod.Namespace, src.Name)
	if err != nil && !errors.Is(err, volume.ErrNotFound) {
		return volume.Result{}, fmt.Errorf("get configMap %s/%s: %w", spec.Pod.Namespace, src.Name, err)
	}
	if err != nil {
		cm = nil
	}
	payload, err := Payload(spec.Pod.Namespace, src.Name, cm, src.Items, contentdir.Mode(src.DefaultMode), optional(src.Optional))
	if err != nil {
		return volume.Result{}, err
	}
	contentdir.ApplyFsGroup(spec.Pod, payload)
	if err := (contentdir.Dir{Mounter: p.Mounter}).SetUp(ctx, dir, payload); err != nil {
		return volume.Result{}, err
	}
	return volume.Result{Path: dir}, nil
}

// TearDown removes the directory.
func (p *Plugin) TearDown(ctx context.Context, dir string) error {
	return contentdir.Dir{Mounter: p.Mounter}.TearDown(ctx, dir)
}

func optional(b *bool) bool { return b != nil && *b }

func objectVersion(cm *v1.ConfigMap, err error) (string, error) {
	if errors.Is(err, volume.ErrNotFound) {
		return "absent", nil
	}
	if err != nil {
		return "", err
	}
	return string(cm.UID) + "@" + cm.ResourceVersion, nil
}
