package manifest

import (
	yaml "go.yaml.in/yaml/v3"
)

// locator finds fields in the text of one document (YAML, or JSON, which
// YAML 1.2 reads too), for messages: the line of a field, and the keys a
// mapping holds more than once. It is built only when a document has a
// problem.
type locator struct {
	root *yaml.Node // nil when the text does not parse
}

func newLocator(data []byte) locator {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return locator{}
	}
	return locator{root: doc.Content[0]}
}

// line returns the line, within the document, of the deepest field of
// path that the document has (of its key, for a field): the field itself,
// or the object that lacks it. It returns 0 when the text did not parse.
func (l locator) line(path []step) int {
	if l.root == nil {
		return 0
	}
	n, line := l.root, l.root.Line
	for _, s := range path {
		next, at := child(n, s)
		if next == nil {
			break
		}
		n, line = next, at
	}
	return line
}

// child returns the node at step s below n, and the line it is shown at.
func child(n *yaml.Node, s step) (*yaml.Node, int) {
	n = resolveAlias(n)
	switch {
	case n.Kind == yaml.SequenceNode && s.isIndex() && s.index < len(n.Content):
		return n.Content[s.index], n.Content[s.index].Line
	case n.Kind != yaml.MappingNode || s.isIndex():
		return nil, 0
	}
	var found, merged *yaml.Node
	line := 0
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolveAlias(n.Content[i]), n.Content[i+1]
		switch {
		case k.Value == s.key:
			found, line = v, n.Content[i].Line // the last one wins, as when decoding
		case k.Tag == "!!merge":
			merged = v
		}
	}
	if found == nil && merged != nil {
		return child(merged, s)
	}
	return found, line
}

// resolveAlias follows an alias to the node it names.
func resolveAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// duplicate is a key given more than once in one mapping.
type duplicate struct {
	path        []step
	line, first int
}

// duplicates returns the keys the document's mappings hold more than once,
// at any depth, in document order. Aliases are not followed: what they
// name is checked where it is defined.
func (l locator) duplicates() []duplicate {
	if l.root == nil {
		return nil
	}
	var out []duplicate
	var walk func(n *yaml.Node, path []step)
	walk = func(n *yaml.Node, path []step) {
		switch n.Kind {
		case yaml.SequenceNode:
			for i, e := range n.Content {
				walk(e, with(path, indexStep(i)))
			}
		case yaml.MappingNode:
			seen := map[string]int{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				p := with(path, keyStep(k.Value))
				if first, ok := seen[k.Value]; ok && k.Tag != "!!merge" {
					out = append(out, duplicate{path: p, line: k.Line, first: first})
				} else {
					seen[k.Value] = k.Line
				}
				walk(n.Content[i+1], p)
			}
		}
	}
	walk(l.root, nil)
	return out
}
