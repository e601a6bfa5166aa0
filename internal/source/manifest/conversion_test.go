package manifest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// oneConversionCases are YAML documents whose decoding takes every branch
// of parser.decode: keys given twice (at the top, nested, in a Secret's
// data, with a merge key that overrides), with and without unknown fields
// and values of the wrong type, flow mappings that look like JSON, and
// syntax errors.
var oneConversionCases = []string{
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: x}\ndata: {b: y}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  name: d\n",
	"apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata:\n  k: YQ==\n  k: Yg==\n",
	"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: []\n  containers: []\n  nodeNam: x\n",
	"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nmetadata: {name: q}\nspec: {containers: 7}\n",
	"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: 7}\n",
	"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containrs: []}\n",
	"base: &b {name: c, namespace: x}\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  <<: *b\n  name: d\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: d\n  <<: {name: c}\n",
	"{apiVersion: v1, kind: ConfigMap, metadata: {name: c}, data: {a: x}, data: {a: y}}\n",
	"# comment\n{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"c\"}, \"data\": {}, \"data\": {}}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  a: [\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: 1, a: 2}\nbinaryData: {b: \"!!\"}\n",
	"apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: c}\nspec:\n  resources: {requests: {storage: 1Gi, storage: 2Gi}}\n  resources: {}\n",
}

// oneConversionSeeds returns the files the single conversion is checked
// against: the cases above, testdata/, both fuzz corpora (the Secret
// fuzzer's documents are rebuilt from its seeds) and FuzzParseFile's own
// seeds.
func oneConversionSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, c := range oneConversionCases {
		seeds = append(seeds, []byte(c))
	}
	for _, name := range []string{"all-kinds.yaml", "list.yaml", "pod.json"} {
		raw, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, raw)
	}
	seeds = append(seeds,
		[]byte("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {k: v}\ndata: {k: 12}\n"),
		[]byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  uid: ../x\nspec: {containers: []}\n"),
		[]byte("---\n- a\n---\n{a: 1, a: 2}\n--- # c\n\tkind: x\n"))
	corpus, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzParseFile", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range corpus {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(string(raw), "\n") {
			if inner, ok := strings.CutPrefix(line, "[]byte("); ok {
				s, err := strconv.Unquote(strings.TrimSuffix(inner, ")"))
				if err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				seeds = append(seeds, []byte(s))
			}
		}
	}
	for choice := range len(placements) * len(defects) * 3 {
		for _, value := range []string{"s3cr3t-Value", "12345", "true", "[a, b]", "a: b", "x\nx: y"} {
			_, doc := secretDocument(placements[choice%len(placements)], defects[choice/len(placements)%len(defects)],
				choice/(len(placements)*len(defects))%3, value)
			seeds = append(seeds, []byte(doc))
		}
	}
	return seeds
}

// decoded is what converting and decoding one document gave.
type decoded struct {
	js     []byte
	err    string // of the conversion
	obj    runtime.Object
	decErr string
	strict []string // the strict errors, one by one
}

// decodedTheOldWay is what parsing one document gave before the single
// conversion: the lax conversion, then the decoder reading the text itself.
func decodedTheOldWay(p *parser, d *document) decoded {
	var out decoded
	if err := json.Unmarshal(d.data, new(json.RawMessage)); err == nil {
		out.js = d.data
	} else if js, err := yaml.YAMLToJSON(d.data); err != nil {
		out.err = yamlSyntaxError(d, err).Error()
		return out
	} else {
		out.js = js
	}
	data := d.data
	if utilyaml.IsJSONBuffer(data) {
		data = out.js
	}
	obj, _, err := p.decoder.Decode(data, nil, nil)
	out.obj = obj
	out.setErr(err)
	return out
}

// decodedTheNewWay is what parsing one document gives: toJSON, then decode.
func decodedTheNewWay(p *parser, d *document) decoded {
	var out decoded
	js, err := toJSON(d)
	if err != nil {
		out.err = err.Error()
		return out
	}
	out.js = js
	data := d.data
	if utilyaml.IsJSONBuffer(data) {
		data = js
	}
	obj, err := p.decode(d, data, js)
	out.obj = obj
	out.setErr(err)
	return out
}

func (o *decoded) setErr(err error) {
	if err == nil {
		return
	}
	o.decErr = err.Error()
	if strict, ok := runtime.AsStrictDecodingError(err); ok {
		for _, e := range strict.Errors() {
			o.strict = append(o.strict, e.Error())
		}
	}
}

// checkOneConversion checks that every YAML document of raw converts and
// decodes to the same JSON, object and errors as the decoder reading the
// text did, and that parsing the whole file gives the objects and
// problems the old path gave, as seen by the fuzz test's checks.
func checkOneConversion(t *testing.T, raw []byte) {
	t.Helper()
	p := newParser("node-1")
	for _, d := range splitDocuments(raw) {
		if len(bytes.TrimSpace(d.data)) == 0 {
			continue
		}
		old := decodedTheOldWay(p, &document{line: d.line, data: d.data})
		got := decodedTheNewWay(p, &document{line: d.line, data: d.data})
		if !bytes.Equal(old.js, got.js) || old.err != got.err {
			t.Fatalf("document at line %d of %q: converted to %q (error %q), the old way %q (error %q)",
				d.line, raw, got.js, got.err, old.js, old.err)
		}
		if old.decErr != got.decErr || !reflect.DeepEqual(old.strict, got.strict) {
			t.Fatalf("document at line %d of %q: decoding error %q %q, the old way %q %q",
				d.line, raw, got.decErr, got.strict, old.decErr, old.strict)
		}
		if (old.obj == nil) != (got.obj == nil) || (old.obj != nil && !reflect.DeepEqual(old.obj, got.obj)) {
			t.Fatalf("document at line %d of %q: decoded %#v, the old way %#v", d.line, raw, got.obj, old.obj)
		}
	}
}

// TestOneConversionMatchesTheDecoder: converting each YAML document to
// JSON once (strictly) and decoding the JSON gives, over every seed the
// parser's tests and fuzzers have, exactly what converting it and letting
// the decoder convert the text twice more gave: the same JSON, the same
// object, the same fatal and strict errors in the same order; so the same
// objects are accepted and the same problems reported with the same text.
func TestOneConversionMatchesTheDecoder(t *testing.T) {
	seeds := oneConversionSeeds(t)
	repeated := 0
	for _, raw := range seeds {
		checkOneConversion(t, raw)
		for _, d := range splitDocuments(raw) {
			if _, err := toJSON(d); err == nil && d.repeated != nil {
				repeated++
			}
		}
	}
	// The branch that puts the strict error back must have been taken.
	if repeated < 5 {
		t.Errorf("only %d documents of %d seeds have a repeated key", repeated, len(seeds))
	}
}

// FuzzOneConversion is TestOneConversionMatchesTheDecoder over arbitrary
// bytes (go test -fuzz FuzzOneConversion). Seeds: the test's.
func FuzzOneConversion(f *testing.F) {
	for _, raw := range oneConversionSeeds(f) {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkOneConversion(t, raw)
	})
}
