package projected

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/atomicwriter"
	"github.com/volume-agent/volume-agent/internal/plugins/configmap"
	"github.com/volume-agent/volume-agent/internal/plugins/contentdir"
	"github.com/volume-agent/volume-agent/internal/plugins/downwardapi"
	"github.com/volume-agent/volume-agent/internal/plugins/secret"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Validate checks every source.
func (p *Plugin) Validate(spec *volume.Spec) error {
	src := spec.Volume.Projected
	if err := contentdir.ValidateItems("projected", nil, src.DefaultMode); err != nil {
		return err
	}
	for i, s := range src.Sources {
		if err := p.validateSource(fmt.Sprintf("projected.sources[%d]", i), spec.Pod, s); err != nil {
			return err
		}
	}
	return nil
}

func (p *Plugin) validateSource(f string, pod *v1.Pod, s v1.VolumeProjection) error {
	switch {
	case countSet(s) != 1:
		return fmt.Errorf("%s must set exactly one of configMap, secret, downwardAPI, serviceAccountToken", f)
	case s.ConfigMap != nil:
		return contentdir.ValidateItems(f+".configMap", s.ConfigMap.Items, nil)
	case s.Secret != nil:
		return contentdir.ValidateItems(f+".secret", s.Secret.Items, nil)
	case s.DownwardAPI != nil:
		return downwardapi.ValidateItems(f+".downwardAPI", pod, s.DownwardAPI.Items, nil)
	case s.ServiceAccountToken != nil:
		if err := atomicwriter.ValidatePath(s.ServiceAccountToken.Path); err != nil {
			return fmt.Errorf("%s.serviceAccountToken.path: %w", f, err)
		}
		if p.Tokens == nil {
			return fmt.Errorf("%s.serviceAccountToken: %w", f, errNoTokens)
		}
		return nil
	}
	return fmt.Errorf("%s: only configMap, secret, downwardAPI and serviceAccountToken sources are supported", f)
}

// countSet counts the source types a projection sets.
func countSet(s v1.VolumeProjection) int {
	n := 0
	for _, set := range []bool{s.ConfigMap != nil, s.Secret != nil, s.DownwardAPI != nil, s.ServiceAccountToken != nil, s.ClusterTrustBundle != nil, s.PodCertificate != nil} {
		if set {
			n++
		}
	}
	return n
}

// ContentVersion joins the versions of every source.
func (p *Plugin) ContentVersion(spec *volume.Spec) (string, error) {
	parts := make([]string, 0, len(spec.Volume.Projected.Sources))
	for i := range spec.Volume.Projected.Sources {
		v, err := p.sourceVersion(spec, i)
		if err != nil {
			return "", fmt.Errorf("projected.sources[%d]: %w", i, err)
		}
		parts = append(parts, v)
	}
	return strings.Join(parts, ","), nil
}

func (p *Plugin) sourceVersion(spec *volume.Spec, i int) (string, error) {
	s := spec.Volume.Projected.Sources[i]
	ns := spec.Pod.Namespace
	switch {
	case s.ConfigMap != nil:
		return contentdir.ObjectVersion(spec.Objects.ConfigMap(ns, s.ConfigMap.Name))
	case s.Secret != nil:
		return contentdir.ObjectVersion(spec.Objects.Secret(ns, s.Secret.Name))
	case s.DownwardAPI != nil:
		files, err := p.sourcePayload(context.Background(), spec, i, "")
		if err != nil {
			return "", err
		}
		return downwardapi.Hash(files), nil
	case s.ServiceAccountToken != nil && p.Tokens != nil:
		return p.Tokens.Version(spec.Pod, s.ServiceAccountToken), nil
	}
	return "", nil
}

// sourcePayload returns the files of source i; dir is the volume directory
// (see tokenPayload).
func (p *Plugin) sourcePayload(ctx context.Context, spec *volume.Spec, i int, dir string) (contentdir.Payload, error) {
	s := spec.Volume.Projected.Sources[i]
	mode := contentdir.Mode(spec.Volume.Projected.DefaultMode)
	switch {
	case s.ConfigMap != nil:
		return configmap.Lookup(spec, s.ConfigMap.Name, s.ConfigMap.Items, mode, isTrue(s.ConfigMap.Optional))
	case s.Secret != nil:
		return secret.Lookup(spec, s.Secret.Name, s.Secret.Items, mode, isTrue(s.Secret.Optional))
	case s.DownwardAPI != nil:
		return downwardapi.Payload(spec.Pod, downwardapi.Allocatable(spec.Node), s.DownwardAPI.Items, mode)
	case s.ServiceAccountToken != nil:
		return p.tokenPayload(ctx, spec.Pod, s.ServiceAccountToken, mode, dir)
	}
	return nil, errors.New("unsupported projection source")
}

func isTrue(b *bool) bool { return b != nil && *b }
