package manifest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// decodeFailure says why a document of a supported kind did not decode.
//
// A decoder's message may quote a value ("cannot unmarshal number 12345 ...").
// That is fine for a Pod, but ConfigMap and Secret content must never reach
// a log or the status API, so for those kinds the message is rebuilt from
// our own words, field names and key names.
func decodeFailure(kind string, js []byte, err error) string {
	if kind == kindConfigMap || kind == kindSecret {
		return fmt.Sprintf("invalid %s: %s", kind, dataProblem(kind, js))
	}
	return fmt.Sprintf("invalid %s: %v", kind, err)
}

// dataProblem finds what is wrong in the content maps of a ConfigMap or Secret.
func dataProblem(kind string, js []byte) string {
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(js, &fields) // readHeader proved it is an object
	for _, name := range []string{"data", "stringData", "binaryData"} {
		if msg := mapProblem(name, fields[name], isBase64(kind, name)); msg != "" {
			return msg
		}
	}
	return "a field has the wrong type (details are withheld for " + kind + "s)"
}

// isBase64 tells whether the values of a content map are base64-encoded.
func isBase64(kind, field string) bool {
	return field == "binaryData" || (kind == kindSecret && field == "data")
}

// mapProblem checks that raw, when present, maps keys to strings (base64
// encoded when b64 is set). It names the key, never the value.
func mapProblem(name string, raw json.RawMessage, b64 bool) string {
	if raw == nil || isEmpty(raw) {
		return ""
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return name + " is not a map of keys to strings"
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		var s *string
		if json.Unmarshal(m[k], &s) != nil {
			return fmt.Sprintf("%s[%q] is not a string", name, k)
		}
		if s != nil && b64 {
			if _, err := base64.StdEncoding.DecodeString(*s); err != nil {
				return fmt.Sprintf("%s[%q] is not valid base64", name, k)
			}
		}
	}
	return ""
}

// strictWarnings turns the decoder's strictness complaints (unknown or
// duplicate fields) into warnings. Those messages name fields and keys only.
func strictWarnings(errs []error, at where) []problem {
	var ps []problem
	for _, err := range errs {
		msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
		msg = strings.TrimPrefix(msg, "yaml: unmarshal errors:")
		msg = yamlLine.ReplaceAllStringFunc(msg, func(s string) string {
			n, _ := strconv.Atoi(yamlLine.FindStringSubmatch(s)[1])
			return fmt.Sprintf("line %d", at.line+n-1)
		})
		ps = append(ps, problem{msg: strings.Join(strings.Fields(msg), " "), at: at, warning: true})
	}
	return ps
}
