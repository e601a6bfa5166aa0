package subpath

import (
	"fmt"
	"sort"
	"strings"
)

// Expand expands the $(VAR) references of a subPathExpr from env, with
// Kubernetes' syntax: $$ is a literal $, and a $ not followed by a
// complete reference is kept as written. As in the kubelet, a variable
// that is missing or empty is an error naming it, so that a subPathExpr
// never quietly names the volume's root or another directory.
func Expand(expr string, env map[string]string) (string, error) {
	missing := map[string]bool{}
	out := expand(expr, func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok && v != ""
	}, func(k string) { missing[k] = true })
	if len(missing) > 0 {
		names := make([]string, 0, len(missing))
		for k := range missing {
			names = append(names, k)
		}
		sort.Strings(names)
		return "", fmt.Errorf("subPathExpr %q: missing value for %s", expr, strings.Join(names, ", "))
	}
	return out, nil
}

// expand replaces each $(name) of s by lookup(name); a name lookup does
// not know is kept as written and given to miss.
func expand(s string, lookup func(string) (string, bool), miss func(string)) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				break
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				miss(name)
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
