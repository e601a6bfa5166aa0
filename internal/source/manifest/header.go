package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// header is what a document says about itself before it is decoded: enough
// to choose how to decode it and to name it in messages.
type header struct {
	apiVersion string
	kind       string
	namespace  string
	name       string
	items      []json.RawMessage // only read for kind List
}

// readHeader reads apiVersion, kind, metadata.namespace, metadata.name and,
// for a List, items. Its errors are our own words: they never quote the
// document.
func readHeader(js []byte) (header, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(js, &fields); err != nil {
		return header{}, errors.New("document is not an object")
	}
	var h header
	var meta map[string]json.RawMessage
	if err := firstError(
		field(fields, "apiVersion", &h.apiVersion, "a string"),
		field(fields, "kind", &h.kind, "a string"),
		field(fields, "metadata", &meta, "an object"),
	); err != nil {
		return h, err
	}
	// Wrong types in these are reported by checkFields.
	_ = field(meta, "namespace", &h.namespace, "")
	_ = field(meta, "name", &h.name, "")
	if h.kind == kindList {
		return h, field(fields, "items", &h.items, "a list")
	}
	return h, nil
}

// field decodes fields[name] into into when it is present and not null;
// want names the type it must have.
func field(fields map[string]json.RawMessage, name string, into any, want string) error {
	raw, ok := fields[name]
	if !ok || isEmpty(raw) {
		return nil
	}
	if json.Unmarshal(raw, into) != nil {
		return &fieldError{path: fieldPath(name), name: name, err: fmt.Errorf("want %s, got %s", want, rawType(raw))}
	}
	return nil
}

// rawType names the JSON type of raw, which is valid JSON.
func rawType(raw json.RawMessage) string {
	switch bytes.TrimSpace(raw)[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "a list"
	case 't', 'f':
		return "a boolean"
	}
	return "a number"
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
