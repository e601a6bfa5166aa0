package manifest

import (
	"fmt"
	"strings"
)

// where locates a document or object within a file, for messages.
type where struct {
	// doc is the 1-based number among the file's non-empty documents; 0
	// in a file of one document, where it would add nothing.
	doc  int
	line int // first line of the object (of the document, outside a List)
	item int // 1-based index within a List; 0 outside one
	kind string
	// namespace is only as written in the document; name may be empty.
	namespace string
	name      string
}

// String is "document N, item I, Kind/name", as far as each applies, or ""
// for the only document of a file: what the line alone does not say.
func (w where) String() string {
	var parts []string
	if w.doc > 0 {
		parts = append(parts, fmt.Sprintf("document %d", w.doc))
	}
	if w.item > 0 {
		parts = append(parts, fmt.Sprintf("item %d", w.item))
	}
	if len(parts) > 0 && w.kind != "" {
		parts = append(parts, w.object())
	}
	return strings.Join(parts, ", ")
}

// object is "Kind", "Kind/name" or "Kind/namespace/name", as far as known.
func (w where) object() string {
	switch {
	case w.name == "":
		return w.kind
	case w.namespace == "":
		return w.kind + "/" + w.name
	default:
		return w.kind + "/" + w.namespace + "/" + w.name
	}
}

// problem is something wrong with a file, which rejects the whole file.
// Messages are built from our own words, field paths and key names, never
// from document text.
type problem struct {
	msg  string
	line int // line in the file; 0 for the file as a whole
	at   where
}

// format renders the problem as shown in Status().Errors, in logs and by
// volume-agent validate: "<file>:<line>: <what>[ (document N, Kind/name)]".
func (p problem) format(file string) string {
	if p.line > 0 {
		file = fmt.Sprintf("%s:%d", file, p.line)
	}
	if at := p.at.String(); at != "" {
		return fmt.Sprintf("%s: %s (%s)", file, p.msg, at)
	}
	return file + ": " + p.msg
}
