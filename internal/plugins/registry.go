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

// FindPV returns the plugin for a PersistentVolume, or an error saying
// which volume type is not supported.
func (r *Registry) FindPV(pv *v1.PersistentVolume) (volume.Plugin, error) {
	if types := setFields(reflect.ValueOf(pv.Spec.PersistentVolumeSource)); len(types) > 1 {
		return nil, fmt.Errorf("PersistentVolume %s sets several volume sources (%s); exactly one is allowed", pv.Name, strings.Join(types, ", "))
	}
	for _, p := range r.plugins {
		if s, ok := p.(volume.PVPlugin); ok && s.CanSupportPV(pv) {
			return p, nil
		}
	}
	return nil, &UnsupportedError{Type: strings.Join(setFields(reflect.ValueOf(pv.Spec.PersistentVolumeSource)), ""), PV: pv.Name}
}

// UnsupportedError says that no plugin handles a volume type.
type UnsupportedError struct {
	Type string
	// PV names the PersistentVolume of that type, for a claim's volume.
	PV string
}

func (e *UnsupportedError) Error() string {
	switch {
	case e.PV != "" && e.Type == "":
		return fmt.Sprintf("PersistentVolume %s sets no volume source", e.PV)
	case e.PV != "":
		return fmt.Sprintf("PersistentVolume %s: %s volumes are not supported by volume-agent", e.PV, e.Type)
	case e.Type == "":
		return "the volume sets no volume source"
	}
	return fmt.Sprintf("%s volumes are not supported by volume-agent", e.Type)
}

// sourceTypes names the volume source types that are set (by JSON name).
func sourceTypes(v *v1.Volume) []string { return setFields(reflect.ValueOf(v.VolumeSource)) }

// setFields names, by their JSON names, the pointer fields of the struct src
// that are set.
func setFields(src reflect.Value) []string {
	var names []string
	for i := 0; i < src.NumField(); i++ {
		if f := src.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			tag := src.Type().Field(i).Tag.Get("json")
			names = append(names, strings.Split(tag, ",")[0])
		}
	}
	return names
}
