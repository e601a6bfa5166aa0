package populator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/plugins"
	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/subpath"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// desiredPod describes every volume of in.pod from its volumes as
// computed one by one and its set-up volumes.
func (p *Populator) desiredPod(in podInputs, vols []cachedVolume, setUp map[string]asw.Volume) dsw.Pod {
	pod := in.pod
	d := dsw.Pod{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, Source: in.src.Name(), Volumes: make([]dsw.Volume, len(vols))}
	for i, v := range vols {
		d.Volumes[i] = v.desired
	}
	refuseSharedDirectories(&d, pod)
	addSubPaths(&d, pod)
	keepSetUpVolumes(&d, setUp)
	p.reportNewProblems(in.src, pod, d)
	return d
}

// addSubPaths gives each volume a plugin sets up the subPath mounts the
// pod's containers want of it.
func addSubPaths(d *dsw.Pod, pod *v1.Pod) {
	for i, v := range d.Volumes {
		if v.Plugin != "" && !v.Conflict {
			d.Volumes[i].SubPaths = subpath.Wanted(pod, specName(v))
		}
	}
}

// reportNewProblems reports, once, each spec problem that is new since the
// last pass (or since start).
func (p *Populator) reportNewProblems(src source.Source, pod *v1.Pod, d dsw.Pod) {
	if p.cfg.Recorder == nil {
		return
	}
	var before map[[2]string]bool
	for _, v := range d.Volumes {
		if v.Problem == "" || v.Kept {
			continue
		}
		if before == nil {
			before = p.problemsBefore(d.UID)
		}
		if before[[2]string{specName(v), v.Problem}] {
			continue
		}
		spec := &volume.Spec{Pod: pod, Volume: &v1.Volume{Name: specName(v)}, Source: src.Name()}
		p.cfg.Recorder.SetUpFailed(spec, errors.New(v.Problem))
	}
}

// problemsBefore returns the problems the desired state holds for pod uid,
// each with the name in the spec of its volume: several volumes of the spec
// can have one key in the desired state (one directory).
func (p *Populator) problemsBefore(uid types.UID) map[[2]string]bool {
	prev, _ := p.cfg.Desired.Pod(uid)
	out := make(map[[2]string]bool, len(prev.Volumes))
	for _, v := range prev.Volumes {
		out[[2]string{specName(v), v.Problem}] = true
	}
	return out
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
	if spec.Volume.PersistentVolumeClaim != nil || spec.Volume.Ephemeral != nil {
		return p.claimVolume(spec)
	}
	if err := checkNotDevice(spec.Pod, spec.Volume); err != nil {
		d.Problem = err.Error()
		return d
	}
	plugin, err := p.cfg.Plugins.Find(spec.Volume)
	if err != nil {
		d.Problem, d.Unsupported = err.Error(), isUnsupported(err)
		return d
	}
	return p.withPlugin(d, plugin, spec)
}

// withPlugin validates the spec for plugin and computes the content version.
func (p *Populator) withPlugin(d dsw.Volume, plugin volume.Plugin, spec *volume.Spec) dsw.Volume {
	if v, ok := plugin.(volume.Validator); ok {
		if err := v.Validate(spec); err != nil {
			d.Problem = err.Error()
			return d
		}
	}
	d.Plugin, d.Spec, d.ReadOnly = plugin.Name(), spec, spec.MountsReadOnly()
	d.Version, d.Waiting = version(plugin, spec)
	return d
}

// isUnsupported tells a volume type the agent lacks from other problems.
func isUnsupported(err error) bool {
	var unsupported *plugins.UnsupportedError
	return errors.As(err, &unsupported) && unsupported.Type != ""
}

// version identifies what SetUp would produce: the volume's spec and, for
// plugins with changing content, their content version. An error looking
// the content up becomes part of the version, so that a change of error
// (or its disappearance) is noticed; an input not known yet is returned as
// the reason to wait.
func version(plugin volume.Plugin, spec *volume.Spec) (string, string) {
	raw, _ := json.Marshal(spec.Volume)
	sum := sha256.Sum256(raw)
	v := hex.EncodeToString(sum[:8])
	versioner, ok := plugin.(volume.Versioner)
	if !ok {
		return v, ""
	}
	content, err := versioner.ContentVersion(spec)
	switch {
	case errors.Is(err, volume.ErrNotReady):
		return v + "/waiting", err.Error()
	case err != nil:
		return v + "/error:" + err.Error(), ""
	}
	return v + "/" + content, ""
}
