package populator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/plugins"
	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// desiredPod describes every volume of pod.
func (p *Populator) desiredPod(src source.Source, pod *v1.Pod, node *v1.Node) dsw.Pod {
	d := dsw.Pod{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, Source: src.Name()}
	podProblem := ""
	if err := layout.ValidName(string(pod.UID)); err != nil {
		podProblem = fmt.Sprintf("pod metadata.uid: %v", err)
	}
	names := map[string]bool{}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		spec := &volume.Spec{Pod: pod, Volume: v, Objects: src.Objects(), Node: node}
		dv := p.desiredVolume(spec, podProblem)
		if names[v.Name] {
			dv = dsw.Volume{Name: v.Name, Problem: fmt.Sprintf("spec.volumes[%d].name %q is used twice", i, v.Name)}
		}
		names[v.Name] = true
		d.Volumes = append(d.Volumes, dv)
	}
	return d
}

// desiredVolume finds the plugin, validates the spec and computes the
// content version. A problem is recorded, never returned: it fails only
// this volume.
func (p *Populator) desiredVolume(spec *volume.Spec, podProblem string) dsw.Volume {
	d := dsw.Volume{Name: spec.Volume.Name}
	if podProblem != "" {
		d.Problem = podProblem
		return d
	}
	if errs := validation.IsDNS1123Label(spec.Volume.Name); len(errs) > 0 {
		d.Problem = fmt.Sprintf("volume name %q: %s", spec.Volume.Name, errs[0])
		return d
	}
	plugin, err := p.cfg.Plugins.Find(spec.Volume)
	if err != nil {
		var unsupported *plugins.UnsupportedError
		d.Unsupported = errors.As(err, &unsupported) && unsupported.Type != ""
		d.Problem = err.Error()
		return d
	}
	if v, ok := plugin.(volume.Validator); ok {
		if err := v.Validate(spec); err != nil {
			d.Problem = err.Error()
			return d
		}
	}
	d.Plugin, d.Spec, d.Version = plugin.Name(), spec, version(plugin, spec)
	return d
}

// version identifies what SetUp would produce: the volume's spec and, for
// plugins with changing content, their content version. An error looking
// the content up becomes part of the version, so that a change of error
// (or its disappearance) is noticed.
func version(plugin volume.Plugin, spec *volume.Spec) string {
	raw, _ := json.Marshal(spec.Volume)
	sum := sha256.Sum256(raw)
	v := hex.EncodeToString(sum[:8])
	if versioner, ok := plugin.(volume.Versioner); ok {
		content, err := versioner.ContentVersion(spec)
		if err != nil {
			return v + "/error:" + err.Error()
		}
		v += "/" + content
	}
	return v
}
