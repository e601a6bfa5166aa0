package manifest

import (
	"fmt"
	"slices"
	"strings"
)

// where locates a document or object within a file, for messages.
type where struct {
	doc  int // 1-based number among the file's non-empty documents; 0 for the whole file
	line int // first line of the document
	item int // 1-based index within a List; 0 outside one
	kind string
	// namespace is only as written in the document; name may be empty.
	namespace string
	name      string
}

func (w where) String() string {
	parts := []string{w.position()}
	if w.kind != "" {
		parts = append(parts, w.object())
	}
	return strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), ", ")
}

// position is "document N at line L[, item I]", or "" for the whole file.
func (w where) position() string {
	var parts []string
	if w.doc > 0 {
		parts = append(parts, fmt.Sprintf("document %d at line %d", w.doc, w.line))
	}
	if w.item > 0 {
		parts = append(parts, fmt.Sprintf("item %d", w.item))
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

// problem is something wrong with a file. A fatal problem rejects the whole
// file; a warning (an unknown or duplicate field) is reported but the file is
// used. Messages are built from our own words, never from document text.
type problem struct {
	msg     string
	at      where
	warning bool
}

func fatalf(at where, format string, args ...any) problem {
	return problem{msg: fmt.Sprintf(format, args...), at: at}
}

// format renders the problem as shown in Status().Errors and in logs:
// "<file>: <what> (document N at line L, Kind/name)".
func (p problem) format(file string) string {
	msg := p.msg
	if p.warning {
		msg = "warning: " + msg
	}
	if at := p.at.String(); at != "" {
		return fmt.Sprintf("%s: %s (%s)", file, msg, at)
	}
	return file + ": " + msg
}

// hasFatal reports whether any of ps rejects its file.
func hasFatal(ps []problem) bool {
	for _, p := range ps {
		if !p.warning {
			return true
		}
	}
	return false
}
