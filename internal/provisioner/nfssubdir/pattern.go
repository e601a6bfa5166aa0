package nfssubdir

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/storagedir"
)

// A pathPattern is literal text and "/" with references to the claim:
//
//	${.PVC.namespace}  ${.PVC.name}  ${.PVC.labels.KEY}  ${.PVC.annotations.KEY}
//
// e.g. "${.PVC.namespace}/${.PVC.name}". The expanded path is relative to
// the export, and must stay inside it (storagedir.ValidRel): a claim
// whose label value is "../x" gets an error, not a directory elsewhere.
// No component of it may start with "archived-" (an archive is no volume)
// or "." (dot-names are the agent's own: markers, volumes moved aside).

// term is one piece of a parsed pattern: literal text, or a reference.
type term struct {
	literal string
	ref     string // "namespace", "name", "labels" or "annotations"; "" for a literal
	key     string // the label or annotation key
}

// parsePattern splits pattern into terms. A "${" without its "}", or a
// reference to anything but the four above, is an error.
func parsePattern(pattern string) ([]term, error) {
	if pattern == "" {
		return nil, errors.New("is empty")
	}
	var terms []term
	for rest := pattern; rest != ""; {
		start := strings.Index(rest, "${")
		if start < 0 {
			return append(terms, term{literal: rest}), nil
		}
		if start > 0 {
			terms = append(terms, term{literal: rest[:start]})
		}
		end := strings.IndexByte(rest[start:], '}')
		if end < 0 {
			return nil, fmt.Errorf("%q has no closing '}'", rest[start:])
		}
		t, err := parseRef(rest[start+2 : start+end])
		if err != nil {
			return nil, err
		}
		terms = append(terms, t)
		rest = rest[start+end+1:]
	}
	return terms, nil
}

// parseRef reads the inside of one ${...}.
func parseRef(ref string) (term, error) {
	field, ok := strings.CutPrefix(ref, ".PVC.")
	switch {
	case !ok:
		return term{}, fmt.Errorf("${%s}: only ${.PVC.namespace}, ${.PVC.name}, ${.PVC.labels.KEY} and ${.PVC.annotations.KEY} are known", ref)
	case field == "namespace" || field == "name":
		return term{ref: field}, nil
	}
	for _, m := range []string{"labels", "annotations"} {
		if key, ok := strings.CutPrefix(field, m+"."); ok && key != "" {
			return term{ref: m, key: key}, nil
		}
	}
	return term{}, fmt.Errorf("${%s}: only ${.PVC.namespace}, ${.PVC.name}, ${.PVC.labels.KEY} and ${.PVC.annotations.KEY} are known", ref)
}

// checkPattern checks the pattern's syntax, without a claim.
func checkPattern(pattern string) error {
	_, err := parsePattern(pattern)
	return err
}

// expandPattern is the path pattern gives for claim, relative to the
// export. A label or annotation the claim does not have is an error, and
// so is a path that would not stay inside the export.
func expandPattern(pattern string, claim *v1.PersistentVolumeClaim) (string, error) {
	terms, err := parsePattern(pattern)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, t := range terms {
		v, err := t.value(claim)
		if err != nil {
			return "", err
		}
		b.WriteString(v)
	}
	rel := b.String()
	if err := storagedir.ValidRel(rel); err != nil {
		return "", fmt.Errorf("expands to a path outside the export: %w", err)
	}
	if err := checkReserved(rel); err != nil {
		return "", fmt.Errorf("expands to %q: %w", rel, err)
	}
	return rel, nil
}

// checkReserved refuses a path with a component that names an archive or
// a dot-name. Archives are matched in any case: an export may be on a file
// system that ignores case.
func checkReserved(rel string) error {
	for _, name := range strings.Split(rel, "/") {
		switch {
		case strings.HasPrefix(name, "."):
			return fmt.Errorf("component %q starts with '.': dot-names are kept for the agent's own use", name)
		case strings.HasPrefix(strings.ToLower(name), storagedir.ArchivePrefix):
			return fmt.Errorf("component %q starts with %q: it names an archive, not a volume", name, storagedir.ArchivePrefix)
		}
	}
	return nil
}

// value is what t stands for in claim.
func (t term) value(claim *v1.PersistentVolumeClaim) (string, error) {
	var m map[string]string
	switch t.ref {
	case "":
		return t.literal, nil
	case "namespace":
		return claim.Namespace, nil
	case "name":
		return claim.Name, nil
	case "labels":
		m = claim.Labels
	case "annotations":
		m = claim.Annotations
	}
	v, ok := m[t.key]
	if !ok {
		return "", fmt.Errorf("the claim has no %s %q", strings.TrimSuffix(t.ref, "s"), t.key)
	}
	return v, nil
}

// subdir is the directory of the export req's volume gets: the class's
// pattern expanded, or <namespace>-<claim>-<pv name>.
func subdir(c class, req provisioner.Request) (string, error) {
	if c.pattern == "" {
		rel := req.Claim.Namespace + "-" + req.Claim.Name + "-" + req.PVName
		return rel, storagedir.ValidRel(rel)
	}
	rel, err := expandPattern(c.pattern, req.Claim)
	if err != nil {
		return "", fmt.Errorf("StorageClass %s: parameter pathPattern %q for claim %s/%s: %w", c.name, c.pattern, req.Claim.Namespace, req.Claim.Name, err)
	}
	return rel, nil
}

// patternSources says, for an error, what of the claim pattern draws on,
// in the pattern's order: `the claim's annotation "dir"`, `the claim's
// label "app"`, "the claim's namespace", "the claim's name", joined by
// "and"; "the StorageClass's pathPattern" when it draws on nothing of the
// claim's.
func patternSources(pattern string) string {
	terms, err := parsePattern(pattern)
	if err != nil {
		return "the StorageClass's pathPattern"
	}
	var sources []string
	for _, t := range terms {
		var s string
		switch t.ref {
		case "":
			continue
		case "namespace", "name":
			s = "the claim's " + t.ref
		default:
			s = fmt.Sprintf("the claim's %s %q", strings.TrimSuffix(t.ref, "s"), t.key)
		}
		if !slices.Contains(sources, s) {
			sources = append(sources, s)
		}
	}
	if len(sources) == 0 {
		return "the StorageClass's pathPattern"
	}
	return strings.Join(sources, " and ")
}
