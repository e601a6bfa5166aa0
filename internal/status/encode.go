package status

import (
	"encoding/json"
	"strconv"
	"time"
)

// appendPod appends what json.MarshalIndent(p, "", indent) encodes,
// without reflection and without a second pass to indent: the answer of
// every long poll of a pod that became ready is this encoding, once per
// change of the pod. TestAppendPodIsMarshalIndent compares the two on
// random statuses that fill every field (a field added to Pod, Volume,
// SubPath or Usage and not written here fails it).
func appendPod(b []byte, p *Pod) ([]byte, error) {
	e := encoder{b: b}
	e.open('{')
	e.str("uid", p.UID, 1)
	e.str("namespace", p.Namespace, 1)
	e.str("name", p.Name, 1)
	e.boolean("ready", p.Ready, 1)
	e.str("state", p.State, 1)
	if p.Reason != "" {
		e.str("reason", p.Reason, 1)
	}
	e.key("volumes", 1)
	switch {
	case p.Volumes == nil:
		e.b = append(e.b, "null"...)
	case len(p.Volumes) == 0:
		e.b = append(e.b, "[]"...)
	default:
		e.open('[')
		for i := range p.Volumes {
			e.element(2)
			e.volume(&p.Volumes[i], 2)
		}
		e.close(']', 1)
	}
	e.close('}', 0)
	return e.b, e.err
}

// encoder writes indented JSON: each member or element on a line of its
// own, at its depth.
type encoder struct {
	b     []byte
	first bool // the next member or element is its object's or array's first
	err   error
}

func (e *encoder) volume(v *Volume, depth int) {
	e.open('{')
	d := depth + 1
	e.str("name", v.Name, d)
	e.str("plugin", v.Plugin, d)
	e.str("path", v.Path, d)
	e.str("state", v.State, d)
	e.str("error", v.Error, d)
	e.strOmitEmpty("claim", v.Claim, d)
	e.strOmitEmpty("pv", v.PV, d)
	e.strOmitEmpty("mode", v.Mode, d)
	if v.ReadOnly {
		e.boolean("readOnly", true, d)
	}
	if v.NoSwap != nil {
		e.boolean("noSwap", *v.NoSwap, d)
	}
	if !v.Since.IsZero() {
		e.time("since", v.Since, d)
	}
	if v.Usage != nil {
		e.usage(v.Usage, d)
	}
	if v.SizeLimitExceeded {
		e.boolean("sizeLimitExceeded", true, d)
	}
	e.strOmitEmpty("warning", v.Warning, d)
	e.strOmitEmpty("limitNotEnforced", v.LimitNotEnforced, d)
	if len(v.SubPaths) > 0 {
		e.key("subPaths", d)
		e.open('[')
		for i := range v.SubPaths {
			e.element(d + 1)
			e.subPath(&v.SubPaths[i], d+1)
		}
		e.close(']', d)
	}
	e.close('}', depth)
}

func (e *encoder) subPath(s *SubPath, depth int) {
	e.open('{')
	d := depth + 1
	e.str("container", s.Container, d)
	e.key("index", d)
	e.b = strconv.AppendInt(e.b, int64(s.Index), 10)
	e.str("subPath", s.SubPath, d)
	e.strOmitEmpty("path", s.Path, d)
	e.strOmitEmpty("error", s.Error, d)
	e.close('}', depth)
}

func (e *encoder) usage(u *Usage, depth int) {
	e.key("usage", depth)
	e.open('{')
	d := depth + 1
	for _, n := range [...]struct {
		name  string
		value uint64
	}{{"capacityBytes", u.CapacityBytes}, {"availableBytes", u.AvailableBytes}, {"usedBytes", u.UsedBytes},
		{"inodes", u.Inodes}, {"inodesFree", u.InodesFree}, {"inodesUsed", u.InodesUsed}} {
		e.key(n.name, d)
		e.b = strconv.AppendUint(e.b, n.value, 10)
	}
	e.str("method", u.Method, d)
	e.time("time", u.Time, d)
	if u.SizeLimitBytes != 0 {
		e.key("sizeLimitBytes", d)
		e.b = strconv.AppendInt(e.b, u.SizeLimitBytes, 10)
	}
	e.close('}', depth)
}

// open starts an object or array.
func (e *encoder) open(c byte) {
	e.b = append(e.b, c)
	e.first = true
}

// close ends an object or array whose closing bracket is at depth; it has
// at least one member.
func (e *encoder) close(c byte, depth int) {
	e.newline(depth)
	e.b = append(e.b, c)
	e.first = false
}

// element starts an element of an array at depth.
func (e *encoder) element(depth int) {
	if !e.first {
		e.b = append(e.b, ',')
	}
	e.first = false
	e.newline(depth)
}

// key starts a member of an object at depth: its name and colon.
func (e *encoder) key(name string, depth int) {
	e.element(depth)
	e.b = append(e.b, '"')
	e.b = append(e.b, name...)
	e.b = append(e.b, `": `...)
}

func (e *encoder) newline(depth int) {
	e.b = append(e.b, '\n')
	for range depth {
		e.b = append(e.b, indent...)
	}
}

func (e *encoder) str(name, v string, depth int) {
	e.key(name, depth)
	e.quote(v)
}

func (e *encoder) strOmitEmpty(name, v string, depth int) {
	if v != "" {
		e.str(name, v, depth)
	}
}

func (e *encoder) boolean(name string, v bool, depth int) {
	e.key(name, depth)
	e.b = strconv.AppendBool(e.b, v)
}

// quote appends s as encoding/json does: as is between quotes when it
// has nothing to escape (printable ASCII but for ", \, <, > and &: the
// names, paths and states of a status); else through encoding/json.
func (e *encoder) quote(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, err := json.Marshal(s)
			e.b = append(e.b, q...)
			e.fail(err)
			return
		}
	}
	e.b = append(e.b, '"')
	e.b = append(e.b, s...)
	e.b = append(e.b, '"')
}

// time appends t as time.Time's MarshalJSON does: RFC 3339 with
// nanoseconds, for a UTC time of years 0 to 9999 (every time of a
// status); any other through MarshalJSON.
func (e *encoder) time(name string, t time.Time, depth int) {
	e.key(name, depth)
	if t.Location() == time.UTC && t.Year() >= 0 && t.Year() <= 9999 {
		e.b = append(e.b, '"')
		e.b = t.AppendFormat(e.b, time.RFC3339Nano)
		e.b = append(e.b, '"')
		return
	}
	q, err := t.MarshalJSON()
	e.b = append(e.b, q...)
	e.fail(err)
}

// fail keeps the first error: encoding/json's own, which the caller
// treats as json.MarshalIndent's.
func (e *encoder) fail(err error) {
	if e.err == nil {
		e.err = err
	}
}
