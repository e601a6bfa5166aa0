package manifest

import (
	"bytes"
	"errors"
)

// document is one YAML document of a file, or a whole JSON file.
type document struct {
	line int // first line in the file, 1-based
	data []byte
	json bool // a JSON file
	// repeated is the strict YAML conversion's error when the lax one
	// succeeded: a mapping key given more than once (toJSON).
	repeated error
	// loc locates fields in data; built on first use, when a problem
	// needs a line.
	loc *locator
}

// splitDocuments splits YAML at "---" lines, as the apimachinery YAML reader
// does, remembering where each document starts.
func splitDocuments(raw []byte) []*document {
	var docs []*document
	start, startLine, line := 0, 1, 1
	for off := 0; off < len(raw); line++ {
		end := len(raw)
		if i := bytes.IndexByte(raw[off:], '\n'); i >= 0 {
			end = off + i + 1
		}
		if isSeparator(raw[off:end]) {
			docs = append(docs, &document{line: startLine, data: raw[start:off]})
			start, startLine = end, line+1
		}
		off = end
	}
	return append(docs, &document{line: startLine, data: raw[start:]})
}

func isSeparator(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, []byte("---"))
	rest = bytes.TrimSpace(rest)
	return ok && (len(rest) == 0 || rest[0] == '#')
}

// firstLine is the line in the file where the document's content starts:
// its first line that is neither blank nor a comment.
func (d *document) firstLine() int {
	rest := d.data
	for n := d.line; len(rest) > 0; n++ {
		l := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			l, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		if l = bytes.TrimSpace(l); len(l) > 0 && (d.json || l[0] != '#') {
			return n
		}
	}
	return d.line
}

// lastLine is the last line in the file that holds some of the document.
func (d *document) lastLine() int {
	content := bytes.TrimRight(d.data, " \t\r\n")
	return d.line + bytes.Count(content, []byte("\n"))
}

func (d *document) locate() locator {
	if d.loc == nil {
		l := newLocator(d.data)
		d.loc = &l
	}
	return *d.loc
}

// inDocument returns the path, within the document, of path within the
// object at at: below items[i] for an item of a List.
func inDocument(at where, path []step) []step {
	if at.item == 0 {
		return path
	}
	return append([]step{keyStep("items"), indexStep(at.item - 1)}, path...)
}

// lineOf returns the line in the file of the field at path of the object
// at at, or of the nearest object above it that is there; at.line when
// the text cannot tell.
func (d *document) lineOf(at where, path []step) int {
	if l := d.locate().line(inDocument(at, path)); l > 0 {
		return d.line + l - 1
	}
	return at.line
}

// duplicatesOf returns the repeated keys of the object at at, with paths
// relative to the object and lines relative to the document.
func (d *document) duplicatesOf(at where) []duplicate {
	prefix := inDocument(at, nil)
	var out []duplicate
	for _, dup := range d.locate().duplicates() {
		if len(dup.path) > len(prefix) && samePrefix(dup.path, prefix) {
			dup.path = dup.path[len(prefix):]
			out = append(out, dup)
		}
	}
	return out
}

func samePrefix(path, prefix []step) bool {
	for i, s := range prefix {
		if path[i] != s {
			return false
		}
	}
	return true
}

// syntaxError is a document that does not parse, at a line of the file.
type syntaxError struct {
	line int
	err  error
}

func (e *syntaxError) Error() string { return e.err.Error() }
func (e *syntaxError) Unwrap() error { return e.err }

// problemOf makes err a problem of the object at at, shown at the line of
// the field it names, if it names one, else at the object's first line.
func (d *document) problemOf(at where, err error) problem {
	line := at.line
	var fe *fieldError
	var fh *fieldHint
	var se *syntaxError
	switch {
	case errors.As(err, &se):
		line = se.line
	case errors.As(err, &fe):
		line = d.lineOf(at, fe.path)
	case errors.As(err, &fh):
		line = d.lineOf(at, fh.path)
	}
	return problem{msg: err.Error(), line: line, at: at}
}
