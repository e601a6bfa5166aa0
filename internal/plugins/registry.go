// Package plugins holds the set of volume plugins the agent runs with and
// finds the plugin for a pod volume. Each volume type lives in its own
// subpackage; this package only wires them together.
package plugins

import (
	"fmt"
	"reflect"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// Registry is a fixed set of plugins.
type Registry struct {
	plugins []volume.Plugin
	byName  map[string]volume.Plugin
}

// NewRegistry returns a registry of the given plugins; names must be unique.
func NewRegistry(plugins ...volume.Plugin) (*Registry, error) {
	r := &Registry{byName: map[string]volume.Plugin{}}
	for _, p := range plugins {
		if _, dup := r.byName[p.Name()]; dup {
			return nil, fmt.Errorf("plugin %s registered twice", p.Name())
		}
		r.byName[p.Name()] = p
		r.plugins = append(r.plugins, p)
	}
	return r, nil
}

// Get returns the plugin with the given name.
func (r *Registry) Get(name string) (volume.Plugin, bool) {
	p, ok := r.byName[name]
	return p, ok
}

// Find returns the plugin for a pod volume, or an error saying which volume
// type is not supported. A volume must set exactly one volume source: one
// that also sets an unsupported source is rejected, not half set up.
func (r *Registry) Find(v *v1.Volume) (volume.Plugin, error) {
	types := sourceTypes(v)
	if len(types) > 1 {
		return nil, fmt.Errorf("the volume sets several volume sources (%s); exactly one is allowed", strings.Join(types, ", "))
	}
	var found []volume.Plugin
	for _, p := range r.plugins {
		if p.CanSupport(v) {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return nil, &UnsupportedError{Type: strings.Join(types, "")}
	}
	return nil, fmt.Errorf("volume %q matches several plugins", v.Name)
}

// UnsupportedError says that no plugin handles a volume type.
type UnsupportedError struct{ Type string }

func (e *UnsupportedError) Error() string {
	if e.Type == "" {
		return "the volume sets no volume source"
	}
	return fmt.Sprintf("%s volumes are not supported by volume-agent", e.Type)
}

// sourceTypes names the volume source types that are set (by JSON name).
func sourceTypes(v *v1.Volume) []string {
	var types []string
	src := reflect.ValueOf(v.VolumeSource)
	for i := 0; i < src.NumField(); i++ {
		if f := src.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			tag := src.Type().Field(i).Tag.Get("json")
			types = append(types, strings.Split(tag, ",")[0])
		}
	}
	return types
}
