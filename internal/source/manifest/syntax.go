package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"sigs.k8s.io/yaml"
)

// toJSON converts a document to JSON. Its errors never quote the document:
// they say where the syntax error is and, for YAML, the parser's reason.
//
// YAML is converted once, strictly, which is all a valid document needs:
// the decoder then reads this JSON (parser.decode) instead of converting
// the text twice more, once as it is and once strictly for repeated keys.
// A strict conversion that fails is done again as it is, as the decoder
// did: its error, if any, is the syntax error; else the strict error is a
// key given more than once, kept in d.repeated for the decoder's errors.
func toJSON(d *document) ([]byte, error) {
	if len(bytes.TrimSpace(d.data)) == 0 {
		return []byte("null"), nil
	}
	err := json.Unmarshal(d.data, new(json.RawMessage))
	switch {
	case err == nil:
		return d.data, nil
	case d.json:
		return nil, jsonSyntaxError(d, err)
	}
	js, strictErr := yaml.YAMLToJSONStrict(d.data)
	if strictErr == nil {
		return js, nil
	}
	js, err = yaml.YAMLToJSON(d.data)
	if err != nil {
		return nil, yamlSyntaxError(d, err)
	}
	d.repeated = strictErr
	return js, nil
}

// quotedWord is a letter or digit the JSON decoder quotes from the text
// ("invalid character 'P' looking for beginning of value"): a character
// of a Secret's value must not be shown.
var quotedWord = regexp.MustCompile(`character '[\pL\pN]' `)

func jsonSyntaxError(d *document, err error) error {
	var syntax *json.SyntaxError
	if !errors.As(err, &syntax) {
		return &syntaxError{line: d.firstLine(), err: errors.New("invalid JSON")}
	}
	line := d.line + bytes.Count(d.data[:syntax.Offset], []byte("\n"))
	reason := quotedWord.ReplaceAllString(syntax.Error(), "character ")
	return &syntaxError{line: min(line, d.lastLine()), err: fmt.Errorf("invalid JSON: %s", reason)}
}

// yamlProblem is a syntax error of the YAML parser (go.yaml.in/yaml/v2,
// under sigs.k8s.io/yaml). Its reasons are fixed texts of the parser that
// never quote the document; other errors (an unknown anchor, a key that
// is a list) may, so only the reasons of this form are shown.
var yamlProblem = regexp.MustCompile(`^(?:error converting YAML to JSON: )?yaml: line (\d+): ([^\n]+)$`)

// parserProblems are the reasons the parser (not the scanner) gives. The
// parser counts lines from 0, the scanner from 1.
var parserProblems = map[string]bool{
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"did not find expected '-' indicator":    true,
	"did not find expected <document start>": true,
	"did not find expected <stream-start>":   true,
	"did not find expected key":              true,
	"did not find expected node content":     true,
	"found duplicate %TAG directive":         true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found undefined tag handle":             true,
}

func yamlSyntaxError(d *document, err error) error {
	line, reason, ok := yamlReason(err)
	if !ok {
		// The parser leaves out a line 0. Parsed one line lower, the
		// document tells it.
		_, again := yaml.YAMLToJSON(append([]byte("\n"), d.data...))
		if line, reason, ok = yamlReason(again); ok {
			line--
		}
	}
	if !ok {
		return &syntaxError{line: d.firstLine(), err: errors.New("invalid YAML")}
	}
	if parserProblems[reason] {
		line++
	}
	line = d.line + line - 1
	return &syntaxError{line: max(d.firstLine(), min(line, d.lastLine())), err: fmt.Errorf("invalid YAML: %s", reason)}
}

// yamlReason returns the line (1-based for a scanner's reason, 0-based for
// a parser's) and the reason of a parser error.
func yamlReason(err error) (line int, reason string, ok bool) {
	if err == nil {
		return 0, "", false
	}
	m := yamlProblem.FindStringSubmatch(err.Error())
	if m == nil {
		return 0, "", false
	}
	line, _ = strconv.Atoi(m[1])
	return line, m[2], true
}
