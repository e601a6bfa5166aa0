package manifest

import (
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/volume-agent/volume-agent/internal/suggest"
)

// step is one step of a field path: a field or map key, or a list index.
type step struct {
	key   string
	index int // the list index; -1 for a key
}

func keyStep(k string) step  { return step{key: k, index: -1} }
func indexStep(i int) step   { return step{index: i} }
func (s step) isIndex() bool { return s.index >= 0 }
func fieldPath(keys ...string) []step {
	path := make([]step, len(keys))
	for i, k := range keys {
		path[i] = keyStep(k)
	}
	return path
}

// with returns path and s in a new slice, so that paths built from one
// prefix never share their last step.
func with(path []step, s step) []step {
	return append(path[:len(path):len(path)], s)
}

// identifier is a key shown as a field name (.name) where the type does not
// say whether it is a field or a map key.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// renderPath shows path the way Kubernetes does, in the object of type t
// (nil when unknown): spec.volumes[0].emptyDir.sizeLimit for fields and
// list indexes, data["app.conf"] for the keys of a map.
func renderPath(t reflect.Type, path []step) string {
	var b strings.Builder
	for _, s := range path {
		t = derefType(t)
		isField, next := false, reflect.Type(nil)
		switch {
		case s.isIndex():
			if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
				next = t.Elem()
			}
		case t != nil && t.Kind() == reflect.Struct:
			isField, next = true, jsonFields(t)[s.key]
		case t != nil && t.Kind() == reflect.Map:
			next = t.Elem()
		default:
			isField = identifier.MatchString(s.key)
		}
		switch {
		case s.isIndex():
			fmt.Fprintf(&b, "[%d]", s.index)
		case isField && b.Len() > 0:
			b.WriteString("." + s.key)
		case isField:
			b.WriteString(s.key)
		default:
			fmt.Fprintf(&b, "[%q]", s.key)
		}
		t = next
	}
	return b.String()
}

func derefType(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// fieldCache holds jsonFields' answers by struct type.
var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// jsonFields returns the fields of struct type t by their JSON name, the
// fields of an embedded struct without a name of its own (`json:",inline"`)
// promoted, as encoding/json decodes them.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case name == "" && f.Anonymous && derefType(f.Type).Kind() == reflect.Struct:
			for k, v := range jsonFields(derefType(f.Type)) {
				if _, ok := m[k]; !ok {
					m[k] = v
				}
			}
			continue
		case !f.IsExported():
			continue
		case name == "":
			name = f.Name
		}
		m[name] = f.Type
	}
	fieldCache.Store(t, m)
	return m
}

// suggestion returns the field of fields that name is most likely a
// misspelling of (suggest.Nearest), or "" when none is close.
func suggestion(name string, fields map[string]reflect.Type) string {
	return suggest.Nearest(name, slices.Collect(maps.Keys(fields)))
}
