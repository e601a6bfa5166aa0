package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// parser turns the bytes of one file into normalized objects. It keeps no
// state between files, so the same bytes always give the same result.
type parser struct {
	// decoder is the client-go scheme's universal deserializer in strict
	// mode: unknown and duplicate fields come back as warnings.
	decoder  runtime.Decoder
	nodeName string
}

func newParser(nodeName string) *parser {
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)
	return &parser{decoder: codecs.UniversalDeserializer(), nodeName: nodeName}
}

// document is one YAML document of a file, or a whole JSON file.
type document struct {
	line int // first line in the file, 1-based
	data []byte
}

// parseFile decodes every document of the file called name. The objects are
// only meaningful when no returned problem is fatal.
func (p *parser) parseFile(name string, raw []byte) ([]object, []problem) {
	jsonFile := filepath.Ext(name) == ".json"
	docs := []document{{line: 1, data: raw}}
	if !jsonFile {
		docs = splitDocuments(raw)
	}
	var objs []object
	var problems []problem
	n := 0
	for _, d := range docs {
		js, err := toJSON(d, jsonFile)
		if err == nil && isEmpty(js) {
			continue
		}
		n++
		if err != nil {
			problems = append(problems, fatalf(where{doc: n, line: d.line}, "%v", err))
			continue
		}
		o, ps := p.parseDocument(d.data, js, where{doc: n, line: d.line})
		objs, problems = append(objs, o...), append(problems, ps...)
	}
	return objs, append(problems, duplicatesWithin(objs)...)
}

// parseDocument decodes one document: a single object or a v1 List.
func (p *parser) parseDocument(data, js []byte, at where) ([]object, []problem) {
	h, err := readHeader(js)
	at.kind, at.namespace, at.name = h.kind, h.namespace, h.name
	if err != nil {
		return nil, []problem{fatalf(at, "%v", err)}
	}
	if h.kind == kindList && h.apiVersion == "v1" {
		return p.parseList(h.items, at)
	}
	if utilyaml.IsJSONBuffer(data) {
		data = js // a YAML flow mapping can look like JSON to the decoder
	}
	return p.parseObject(data, js, h, at)
}

// parseList decodes the items of a v1 List; each item must carry its own
// apiVersion and kind, as `kubectl get -o yaml` writes them.
func (p *parser) parseList(items []json.RawMessage, at where) ([]object, []problem) {
	var objs []object
	var problems []problem
	for i, item := range items {
		itemAt := where{doc: at.doc, line: at.line, item: i + 1}
		h, err := readHeader(item)
		itemAt.kind, itemAt.namespace, itemAt.name = h.kind, h.namespace, h.name
		switch {
		case err != nil:
			problems = append(problems, fatalf(itemAt, "%v", err))
		case h.kind == kindList:
			problems = append(problems, fatalf(itemAt, "a List inside a List is not supported"))
		default:
			o, ps := p.parseObject(item, item, h, itemAt)
			objs, problems = append(objs, o...), append(problems, ps...)
		}
	}
	return objs, problems
}

// parseObject decodes one object of a supported kind and normalizes it.
func (p *parser) parseObject(data, js []byte, h header, at where) ([]object, []problem) {
	if err := checkKind(h); err != nil {
		return nil, []problem{fatalf(at, "%v", err)}
	}
	obj, _, err := p.decoder.Decode(data, nil, nil)
	var problems []problem
	if strict, ok := runtime.AsStrictDecodingError(err); ok {
		problems, err = strictWarnings(strict.Errors(), at), nil
	}
	if err != nil {
		return nil, append(problems, fatalf(at, "%s", decodeFailure(h.kind, js, err)))
	}
	o, err := p.normalize(obj, at)
	if err != nil {
		return nil, append(problems, fatalf(at, "%v", err))
	}
	return []object{o}, problems
}

func checkKind(h header) error {
	switch {
	case h.apiVersion == "":
		return errors.New("apiVersion is missing")
	case h.kind == "":
		return errors.New("kind is missing")
	}
	if want, ok := apiVersionOf[h.kind]; !ok || h.apiVersion != want {
		return fmt.Errorf("unsupported kind %q (apiVersion %q): only v1 Pod, ConfigMap, Secret, "+
			"PersistentVolume, PersistentVolumeClaim, Node and List, and storage.k8s.io/v1 StorageClass are read",
			h.kind, h.apiVersion)
	}
	return nil
}

// splitDocuments splits YAML at "---" lines, as the apimachinery YAML reader
// does, remembering where each document starts.
func splitDocuments(raw []byte) []document {
	var docs []document
	start, startLine, line := 0, 1, 1
	for off := 0; off < len(raw); line++ {
		end := len(raw)
		if i := bytes.IndexByte(raw[off:], '\n'); i >= 0 {
			end = off + i + 1
		}
		if isSeparator(raw[off:end]) {
			docs = append(docs, document{line: startLine, data: raw[start:off]})
			start, startLine = end, line+1
		}
		off = end
	}
	return append(docs, document{line: startLine, data: raw[start:]})
}

func isSeparator(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, []byte("---"))
	rest = bytes.TrimSpace(rest)
	return ok && (len(rest) == 0 || rest[0] == '#')
}

// yamlLine finds the line number in a YAML parser's error message.
var yamlLine = regexp.MustCompile(`line (\d+)`)

// toJSON converts a document to JSON. Its errors never quote the document:
// they say only where the syntax error is.
func toJSON(d document, jsonFile bool) ([]byte, error) {
	if len(bytes.TrimSpace(d.data)) == 0 {
		return []byte("null"), nil
	}
	err := json.Unmarshal(d.data, new(json.RawMessage))
	switch {
	case err == nil:
		return d.data, nil
	case jsonFile:
		return nil, jsonSyntaxError(d.data, err)
	}
	return yamlToJSON(d)
}

func jsonSyntaxError(data []byte, err error) error {
	var syntax *json.SyntaxError
	if !errors.As(err, &syntax) {
		return errors.New("invalid JSON")
	}
	return fmt.Errorf("invalid JSON near line %d", 1+bytes.Count(data[:syntax.Offset], []byte("\n")))
}

func yamlToJSON(d document) ([]byte, error) {
	js, err := yaml.YAMLToJSON(d.data)
	if err == nil {
		return js, nil
	}
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return nil, errors.New("invalid YAML")
	}
	n, _ := strconv.Atoi(m[1])
	return nil, fmt.Errorf("invalid YAML near line %d", d.line+n-1)
}

func isEmpty(js []byte) bool {
	return bytes.Equal(bytes.TrimSpace(js), []byte("null"))
}
