package mount

import "strings"

// OneLine returns err with its text on one line, for a log line, an API
// field or an event: the lines of a tool's output (mount(8), mount.nfs,
// k8s.io/mount-utils' "Mounting command: …" report) and of errors.Join are
// joined with "; ", each trimmed, empty ones dropped; nothing else of the
// text changes. errors.Is and errors.As still see what err wraps.
func OneLine(err error) error {
	if err == nil || !strings.ContainsAny(err.Error(), "\r\n") {
		return err
	}
	return &oneLineError{err: err, msg: Fold(err.Error())}
}

// Fold joins the lines of s with "; ", each trimmed, empty ones dropped.
func Fold(s string) string {
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	out := lines[:0]
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "; ")
}

type oneLineError struct {
	err error
	msg string
}

func (e *oneLineError) Error() string { return e.msg }
func (e *oneLineError) Unwrap() error { return e.err }
