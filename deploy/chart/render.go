// Package chart renders the Helm chart in volume-agent/ the way helm install
// does, with the Helm Go SDK and no cluster: the tests that hold the chart's
// default rendering to deploy/daemonset.yaml, and the end-to-end tests that
// apply it to a real API server, use it.
//
// Only tests import it: the Helm SDK must never reach the agent's binary
// (go list -deps ./cmd/volume-agent lists no helm.sh package).
package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// Release names a release of the chart.
type Release struct {
	Name      string
	Namespace string
}

// DefaultRelease is the release the helm install of docs/deploying.md makes. With the
// chart's default values it renders the objects of deploy/daemonset.yaml
// but the Namespace, which exists before the release.
var DefaultRelease = Release{Name: "volume-agent", Namespace: "volume-agent"}

// Render renders the chart in dir for rel with values over its values.yaml
// (validated against its values.schema.json) and returns its objects in
// Helm's install order. Templates must not refer to values that do not
// exist: the engine runs in strict mode.
func Render(dir string, rel Release, values map[string]any) ([]*unstructured.Unstructured, error) {
	files, err := renderFiles(dir, rel, values)
	if err != nil {
		return nil, err
	}
	for name := range files {
		if path.Base(name) == notes {
			delete(files, name) // printed by helm install, not applied
		}
	}
	_, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, m := range manifests {
		objs, err := Decode([]byte(m.Content))
		if err != nil {
			return nil, fmt.Errorf("chart %s: %s: %w", dir, m.Name, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// Notes renders the chart's NOTES.txt, what helm install prints, for rel
// with values.
func Notes(dir string, rel Release, values map[string]any) (string, error) {
	files, err := renderFiles(dir, rel, values)
	if err != nil {
		return "", err
	}
	for name, text := range files {
		if path.Base(name) == notes {
			return text, nil
		}
	}
	return "", fmt.Errorf("chart %s has no templates/%s", dir, notes)
}

const notes = "NOTES.txt"

// renderFiles runs the chart's templates as helm install does, and returns
// their output by template path.
func renderFiles(dir string, rel Release, values map[string]any) (map[string]string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	opts := chartutil.ReleaseOptions{Name: rel.Name, Namespace: rel.Namespace, Revision: 1, IsInstall: true}
	vals, err := chartutil.ToRenderValues(ch, values, opts, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", dir, err)
	}
	files, err := engine.Engine{Strict: true}.Render(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("render chart %s: %w", dir, err)
	}
	return files, nil
}

// Decode parses a stream of YAML documents into objects, skipping empty
// ones (a document of comments only).
func Decode(raw []byte) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
}
