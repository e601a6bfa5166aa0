package manifest

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// decodeFailure says why a document of a supported kind did not decode,
// when checkFields found nothing to blame: the decoder's own message.
//
// A decoder's message may quote a value ("cannot unmarshal number 12345 ...").
// That is fine for a Pod, but ConfigMap and Secret content must never reach
// a log or the status API, so for those kinds the message is withheld.
func decodeFailure(kind string, err error) error {
	if kind == kindConfigMap || kind == kindSecret {
		return fmt.Errorf("invalid %s: a field has the wrong type (details are withheld for %ss)", kind, kind)
	}
	return fmt.Errorf("invalid %s: %w", kind, err)
}

// yamlLine is where a YAML message says its line.
var yamlLine = regexp.MustCompile(`line (\d+): `)

// strictProblems turns the decoder's strictness complaints (unknown or
// duplicate fields) that checkFields did not find into problems. Those
// messages name fields and keys only.
func strictProblems(errs []error, d *document, at where) []problem {
	var ps []problem
	for _, err := range errs {
		msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
		msg = strings.TrimPrefix(msg, "yaml: unmarshal errors:")
		line := at.line
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			n, _ := strconv.Atoi(m[1])
			line = d.line + n - 1
			msg = strings.Replace(msg, m[0], "", 1)
		}
		ps = append(ps, problem{msg: strings.Join(strings.Fields(msg), " "), line: line, at: at})
	}
	return ps
}
