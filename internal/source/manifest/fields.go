package manifest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// fieldError is a problem with one field of an object, shown as
// "path: err" at the line of the field.
type fieldError struct {
	path []step // for the line; relative to the object
	name string // path as shown
	err  error
}

func (e *fieldError) Error() string { return e.name + ": " + e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

// fieldHint is an error whose text names its field already; it is shown as
// it is, at the line of the field.
type fieldHint struct {
	path []step
	err  error
}

func (e *fieldHint) Error() string { return e.err.Error() }
func (e *fieldHint) Unwrap() error { return e.err }

// hint makes err show at the line of the field at path.
func hint(err error, keys ...string) error {
	if err == nil {
		return nil
	}
	return &fieldHint{path: fieldPath(keys...), err: err}
}

// The types whose JSON form the checker knows although they decode
// themselves; any other type that decodes itself is left to the decoder.
var (
	quantityType    = reflect.TypeFor[resource.Quantity]()
	intOrStringType = reflect.TypeFor[intstr.IntOrString]()
	timeType        = reflect.TypeFor[metav1.Time]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// checker finds what in a decoded JSON document does not fit the Go type
// the decoder fills: unknown fields, values of the wrong type, quantities
// and times that do not parse. Its messages name the field and say what
// was wanted in our own words.
type checker struct {
	// yaml is set for a YAML document, where a value meant as a string
	// may have been read as a number or a boolean for want of quotes.
	yaml bool
	// root is the type of the object, to render paths.
	root  reflect.Type
	found []*fieldError
}

// checkFields checks the JSON document js against type t.
func checkFields(t reflect.Type, js []byte, isYAML bool) []*fieldError {
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return nil // not JSON: toJSON reported it
	}
	c := &checker{yaml: isYAML, root: t}
	c.value(t, v, nil)
	return c.found
}

func (c *checker) fail(path []step, err error) {
	c.found = append(c.found, &fieldError{path: path, name: renderPath(c.root, path), err: err})
}

// value checks v against t. A null fits anything, as it does for the decoder.
func (c *checker) value(t reflect.Type, v any, path []step) {
	if v == nil {
		return
	}
	switch t {
	case quantityType:
		c.quantity(v, path)
		return
	case intOrStringType:
		c.intOrString(v, path)
		return
	case timeType:
		c.time(v, path)
		return
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return // its own format, checked by the decoder
	}
	switch t.Kind() {
	case reflect.Pointer:
		c.value(t.Elem(), v, path)
	case reflect.Interface:
	case reflect.Struct:
		c.object(t, v, path)
	case reflect.Map:
		c.mapping(t, v, path)
	case reflect.Slice, reflect.Array:
		c.list(t, v, path)
	case reflect.String:
		if _, ok := v.(string); !ok {
			c.wrongType(path, "a string", v)
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			c.wrongType(path, "true or false", v)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		c.integer(v, path, t.Bits(), false)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		c.integer(v, path, t.Bits(), true)
	case reflect.Float32, reflect.Float64:
		if n, ok := v.(json.Number); !ok {
			c.wrongType(path, "a number", v)
		} else if _, err := strconv.ParseFloat(string(n), t.Bits()); err != nil {
			c.fail(path, fmt.Errorf("%s is out of range for a number", n))
		}
	}
}

// object checks the fields of a struct, in the order of their names.
func (c *checker) object(t reflect.Type, v any, path []step) {
	m, ok := v.(map[string]any)
	if !ok {
		c.wrongType(path, "an object", v)
		return
	}
	fields := jsonFields(t)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		ft, ok := fields[k]
		if !ok {
			c.unknown(with(path, keyStep(k)), fields)
			continue
		}
		c.value(ft, m[k], with(path, keyStep(k)))
	}
}

// unknown reports a field the type does not have, the way kubectl apply's
// strict validation refuses it: a misspelt field must not be dropped
// silently.
func (c *checker) unknown(path []step, fields map[string]reflect.Type) {
	if s := suggestion(path[len(path)-1].key, fields); s != "" {
		c.fail(path, fmt.Errorf("unknown field (did you mean %s?)", s))
		return
	}
	c.fail(path, errors.New("unknown field"))
}

func (c *checker) mapping(t reflect.Type, v any, path []step) {
	m, ok := v.(map[string]any)
	if !ok {
		c.wrongType(path, "an object", v)
		return
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		c.value(t.Elem(), m[k], with(path, keyStep(k)))
	}
}

func (c *checker) list(t reflect.Type, v any, path []step) {
	if t.Elem().Kind() == reflect.Uint8 {
		c.bytes(v, path)
		return
	}
	l, ok := v.([]any)
	if !ok {
		c.wrongType(path, "a list", v)
		return
	}
	for i, e := range l {
		c.value(t.Elem(), e, with(path, indexStep(i)))
	}
}

// bytes checks a []byte, which JSON holds as base64 text.
func (c *checker) bytes(v any, path []step) {
	s, ok := v.(string)
	if !ok {
		c.wrongType(path, "base64-encoded text", v)
		return
	}
	if _, err := base64.StdEncoding.DecodeString(s); err != nil {
		c.fail(path, errors.New("want base64-encoded text, got text that is not base64"))
	}
}

// integer checks an integer of the given size. Its value is quoted: no
// integer field holds ConfigMap or Secret content.
func (c *checker) integer(v any, path []step, bits int, unsigned bool) {
	n, ok := v.(json.Number)
	if !ok {
		c.wrongType(path, "an integer", v)
		return
	}
	var err error
	if unsigned {
		_, err = strconv.ParseUint(string(n), 10, bits)
	} else {
		_, err = strconv.ParseInt(string(n), 10, bits)
	}
	if errors.Is(err, strconv.ErrRange) {
		c.fail(path, fmt.Errorf("%s is out of range for an integer of %d bits", n, bits))
	} else if err != nil {
		c.fail(path, fmt.Errorf("want an integer, got %s", n))
	}
}

// quantity checks a resource quantity, a string or a number. Its value is
// quoted: no ConfigMap or Secret has a quantity.
func (c *checker) quantity(v any, path []step) {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case json.Number:
		s = string(v)
	default:
		c.wrongType(path, "a quantity such as 1Gi or 500m", v)
		return
	}
	if _, err := resource.ParseQuantity(s); err != nil {
		c.fail(path, fmt.Errorf("invalid quantity %q: want a number with an optional unit, such as 1Gi, 512Mi, 1G or 500m", s))
	}
}

// intOrString checks a field such as a port that takes a number or a name.
func (c *checker) intOrString(v any, path []step) {
	switch v.(type) {
	case string:
	case json.Number:
		c.integer(v, path, 32, false)
	default:
		c.wrongType(path, "an integer or a string", v)
	}
}

// time checks a time (metadata.creationTimestamp, say), which is RFC 3339 text.
func (c *checker) time(v any, path []step) {
	s, ok := v.(string)
	if !ok {
		c.wrongType(path, "a time such as 2024-05-01T12:00:00Z", v)
		return
	}
	if _, err := time.Parse(time.RFC3339, s); err != nil {
		c.fail(path, fmt.Errorf("invalid time %q: want a time such as 2024-05-01T12:00:00Z", s))
	}
}

// wrongType reports a value of another JSON type than want. It names the
// type of the value, never the value.
func (c *checker) wrongType(path []step, want string, v any) {
	got := jsonType(v)
	if c.yaml && want == "a string" && (got == "a number" || got == "a boolean") {
		c.fail(path, fmt.Errorf("want a string, got %s (write the value in quotes)", got))
		return
	}
	c.fail(path, fmt.Errorf("want %s, got %s", want, got))
}

// jsonType names the JSON type of a decoded value.
func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	}
	return "an object"
}
