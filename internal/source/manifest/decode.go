package manifest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/volume-agent/volume-agent/internal/source/volumesnapshot"
)

// parser turns the bytes of one file into normalized objects. It keeps no
// state between files, so the same bytes always give the same result.
//
// Fields are validated strictly, as kubectl apply does by default: an
// unknown or repeated field rejects the file, so that a misspelt field
// (sizeLimt) is never dropped silently.
type parser struct {
	// decoder is the client-go scheme's universal deserializer in strict
	// mode: unknown and duplicate fields come back as strict errors.
	decoder  runtime.Decoder
	nodeName string
	// types are the Go types of the supported kinds, for checkFields.
	types map[string]reflect.Type
}

// manifestScheme holds the groups of the kinds a manifest may define, and
// only those: checkKind refuses every other kind before the decoder sees it.
// Registering client-go's whole scheme here cost about 4,500 allocations
// and 0.6 MB at every start, for some fifty groups no manifest can use. It
// is built by the first parser, not when the package is initialised: every
// process of the agent's binary imports this package, each host path
// checker process (internal/procpool) among them, whose start the first
// hostPath set-ups of a burst wait for; a cluster-mode agent, which parses
// no manifest, never builds it.
var manifestScheme = sync.OnceValue(func() *runtime.Scheme {
	schemeBuilds.Add(1)
	s := runtime.NewScheme()
	if err := errors.Join(corev1.AddToScheme(s), storagev1.AddToScheme(s), volumesnapshot.AddToScheme(s)); err != nil {
		panic(fmt.Sprintf("manifest scheme: %v", err)) // static registrations: a programming error
	}
	return s
})

// schemeBuilds counts the builds of manifestScheme, for the test that
// initialising the package builds none.
var schemeBuilds atomic.Int32

func newParser(nodeName string) *parser {
	s := manifestScheme()
	codecs := serializer.NewCodecFactory(s, serializer.EnableStrict)
	types := make(map[string]reflect.Type, len(apiVersionOf))
	for kind, apiVersion := range apiVersionOf {
		if obj, err := s.New(schema.FromAPIVersionAndKind(apiVersion, kind)); err == nil {
			types[kind] = reflect.TypeOf(obj).Elem()
		}
	}
	return &parser{decoder: codecs.UniversalDeserializer(), nodeName: nodeName, types: types}
}

// parseFile decodes every document of the file called name. The objects are
// only meaningful when no problem is returned. Problems come in the order
// of their lines; in a file of one document, they do not name the document.
func (p *parser) parseFile(name string, raw []byte) ([]object, []problem) {
	jsonFile := filepath.Ext(name) == ".json"
	docs := []*document{{line: 1, data: raw, json: true}}
	if !jsonFile {
		docs = splitDocuments(raw)
	}
	var objs []object
	var problems []problem
	n := 0
	for _, d := range docs {
		js, err := toJSON(d)
		if err == nil && isEmpty(js) {
			continue
		}
		n++
		at := where{doc: n, line: d.firstLine()}
		if err != nil {
			problems = append(problems, d.problemOf(at, err))
			continue
		}
		o, ps := p.parseDocument(d, js, at)
		objs, problems = append(objs, o...), append(problems, ps...)
	}
	if n == 1 {
		for i := range objs {
			objs[i].at.doc = 0
		}
		for i := range problems {
			problems[i].at.doc = 0
		}
	}
	problems = append(problems, duplicatesWithin(objs)...)
	slices.SortStableFunc(problems, func(a, b problem) int { return cmp.Compare(a.line, b.line) })
	return objs, problems
}

// parseDocument decodes one document: a single object or a v1 List.
func (p *parser) parseDocument(d *document, js []byte, at where) ([]object, []problem) {
	h, err := readHeader(js)
	at.kind, at.namespace, at.name = h.kind, h.namespace, h.name
	if err != nil {
		return nil, []problem{d.problemOf(at, err)}
	}
	if h.kind == kindList && h.apiVersion == "v1" {
		return p.parseList(d, h.items, at)
	}
	data := d.data
	if utilyaml.IsJSONBuffer(data) {
		data = js // a YAML flow mapping can look like JSON to the decoder
	}
	return p.parseObject(d, data, js, h, at)
}

// parseList decodes the items of a v1 List; each item must carry its own
// apiVersion and kind, as `kubectl get -o yaml` writes them.
func (p *parser) parseList(d *document, items []json.RawMessage, at where) ([]object, []problem) {
	var objs []object
	var problems []problem
	repeatedInItems := false
	for i, item := range items {
		itemAt := where{doc: at.doc, item: i + 1}
		itemAt.line = d.lineOf(itemAt, nil)
		h, err := readHeader(item)
		itemAt.kind, itemAt.namespace, itemAt.name = h.kind, h.namespace, h.name
		switch {
		case err != nil:
			problems = append(problems, d.problemOf(itemAt, err))
		case h.kind == kindList:
			problems = append(problems, d.problemOf(itemAt, errors.New("a List inside a List is not supported")))
		case d.repeated != nil && checkKind(h) == nil && len(repeatedProblems(d, p.types[h.kind], itemAt)) > 0:
			// The decoder reads an item as JSON, in which the YAML
			// conversion kept the last of a repeated key: only the text
			// tells, as for a document (a name given twice would
			// silently rename the object, and drop the first name).
			problems = append(problems, repeatedProblems(d, p.types[h.kind], itemAt)...)
			repeatedInItems = true
		default:
			o, ps := p.parseObject(d, item, item, h, itemAt)
			objs, problems = append(objs, o...), append(problems, ps...)
		}
	}
	if d.repeated != nil && !repeatedInItems {
		// A key of the List itself given twice (items, kind...).
		ps := repeatedProblems(d, nil, at)
		if len(ps) == 0 {
			ps = []problem{d.problemOf(at, d.repeated)}
		}
		problems = append(problems, ps...)
	}
	return objs, problems
}

// parseObject decodes one object of a supported kind and normalizes it.
// When the decoder refuses it, checkFields says which field is wrong and
// why; the decoder's own message is the last resort.
func (p *parser) parseObject(d *document, data, js []byte, h header, at where) ([]object, []problem) {
	if err := checkKind(h); err != nil {
		return nil, []problem{d.problemOf(at, err)}
	}
	obj, err := p.decode(d, data, js)
	// A YAML flow mapping reaches the decoder as JSON, whose repeated keys
	// the conversion dropped: only the text can tell.
	flow := !d.json && utilyaml.IsJSONBuffer(d.data)
	if err != nil || flow {
		if ps := p.fieldProblems(d, js, h.kind, at); len(ps) > 0 {
			return nil, ps
		}
	}
	if strict, ok := runtime.AsStrictDecodingError(err); ok {
		return nil, strictProblems(strict.Errors(), d, at)
	}
	if err != nil {
		return nil, []problem{d.problemOf(at, decodeFailure(h.kind, err))}
	}
	o, err := p.normalize(obj, at, data)
	if err != nil {
		return nil, []problem{d.problemOf(at, err)}
	}
	return []object{o}, nil
}

// decode decodes the object of data, its text, strictly. YAML text is
// decoded from js, the JSON toJSON converted it to, with the errors the
// decoder gives for the text itself: it would convert the text again
// twice, as it is (to js, byte for byte) and strictly, whose error is
// d.repeated. So, as the decoder does, a fatal error comes alone, and
// strict errors come after the repeated keys.
func (p *parser) decode(d *document, data, js []byte) (runtime.Object, error) {
	if utilyaml.IsJSONBuffer(data) {
		return decodeOne(p.decoder, data)
	}
	obj, err := decodeOne(p.decoder, js)
	if d.repeated == nil || (err != nil && !runtime.IsStrictDecodingError(err)) {
		return obj, err
	}
	errs := []error{d.repeated}
	if strict, ok := runtime.AsStrictDecodingError(err); ok {
		errs = append(errs, strict.Errors()...)
	}
	return obj, runtime.NewStrictDecodingError(errs)
}

func decodeOne(dec runtime.Decoder, data []byte) (runtime.Object, error) {
	obj, _, err := dec.Decode(data, nil, nil)
	return obj, err
}

// fieldProblems finds, with their lines, the fields of the object at at
// that are repeated, unknown or of the wrong type, in document order.
func (p *parser) fieldProblems(d *document, js []byte, kind string, at where) []problem {
	t := p.types[kind]
	ps := repeatedProblems(d, t, at)
	for _, fe := range checkFields(t, js, !d.json) {
		ps = append(ps, d.problemOf(at, fe))
	}
	slices.SortStableFunc(ps, func(a, b problem) int { return cmp.Compare(a.line, b.line) })
	return ps
}

// repeatedProblems are the keys given more than once in the object at
// at, whose Go type is t (nil if it has none), each at the line of its
// repeat.
func repeatedProblems(d *document, t reflect.Type, at where) []problem {
	var ps []problem
	for _, dup := range d.duplicatesOf(at) {
		err := fmt.Errorf("given more than once (first at line %d)", d.line+dup.first-1)
		pr := d.problemOf(at, &fieldError{path: dup.path, name: renderPath(t, dup.path), err: err})
		pr.line = d.line + dup.line - 1 // the repeat, not the last one
		ps = append(ps, pr)
	}
	return ps
}

func checkKind(h header) error {
	switch {
	case h.apiVersion == "":
		return errors.New("apiVersion is missing")
	case h.kind == "":
		return errors.New("kind is missing")
	}
	if want, ok := apiVersionOf[h.kind]; !ok || h.apiVersion != want {
		return hint(fmt.Errorf("unsupported kind %q (apiVersion %q): only v1 Pod, ConfigMap, Secret, "+
			"PersistentVolume, PersistentVolumeClaim, Node and List, storage.k8s.io/v1 StorageClass, and "+
			"snapshot.storage.k8s.io/v1 VolumeSnapshot and VolumeSnapshotClass are read",
			h.kind, h.apiVersion), "kind")
	}
	return nil
}

// isEmpty tells whether a document's JSON is null: no object.
func isEmpty(js []byte) bool {
	return bytes.Equal(bytes.TrimSpace(js), []byte("null"))
}
