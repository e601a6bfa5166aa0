package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The reference pages (docs/flags.md, the chart values of
// docs/deploying.md) are checked against what they describe, in both
// directions: a flag or value added without its row fails here, and so
// does a row left for one that is gone.

// refBackticked is a name in backticks in a table's first cell.
var refBackticked = regexp.MustCompile("`([^`]+)`")

// refTableNames returns the backticked names of the first column of the
// first table under the heading of a page (to the next heading of the same
// level or higher), and the line of each.
func refTableNames(t *testing.T, page, heading string) map[string]int {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	lines := mdBlankCode(strings.Split(string(text), "\n"))
	level, start := 0, -1
	for i, l := range lines {
		if m := mdHeading.FindStringSubmatch(l); m != nil && m[1] == heading {
			level, start = len(l)-len(strings.TrimLeft(l, "#")), i
			break
		}
	}
	if start < 0 {
		t.Fatalf("%s has no heading %q", page, heading)
	}
	names := map[string]int{}
	inTable := false
	for i := start + 1; i < len(lines); i++ {
		l := lines[i]
		if m := mdHeading.FindStringSubmatch(l); m != nil && len(l)-len(strings.TrimLeft(l, "#")) <= level {
			break
		}
		if !mdTableRow.MatchString(l) {
			if inTable {
				break
			}
			continue
		}
		if !inTable { // the header row
			inTable = true
			continue
		}
		if mdDelimiterRow.MatchString(l) {
			continue
		}
		first := strings.SplitN(strings.TrimPrefix(strings.TrimSpace(l), "|"), "|", 2)[0]
		for _, m := range refBackticked.FindAllStringSubmatch(first, -1) {
			names[m[1]] = i + 1
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s: no table rows under %q", page, heading)
	}
	return names
}

// refChartValues returns every key path of values.yaml, top-level and
// nested ("image.tag"), and whether each is a leaf: a key whose value is
// not a mapping with keys of its own (a list, a scalar, {}).
func refChartValues(t *testing.T) map[string]bool {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(root, "deploy/chart/volume-agent/values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(text, &doc); err != nil {
		t.Fatal(err)
	}
	values := map[string]bool{}
	var walk func(prefix string, n *yaml.Node)
	walk = func(prefix string, n *yaml.Node) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := prefix+n.Content[i].Value, n.Content[i+1]
			leaf := val.Kind != yaml.MappingNode || len(val.Content) == 0
			values[key] = leaf
			if !leaf {
				walk(key+".", val)
			}
		}
	}
	walk("", doc.Content[0])
	return values
}

// TestChartValuesDocumented checks that docs/deploying.md's table of chart
// values names every value of values.yaml (each leaf; a nested one by its
// full path, image.tag), and nothing values.yaml lacks.
func TestChartValuesDocumented(t *testing.T) {
	const page, heading = "docs/deploying.md", "Chart values"
	values := refChartValues(t)
	documented := refTableNames(t, page, heading)
	for _, name := range mdSorted(refLeaves(values)) {
		if _, ok := documented[name]; !ok {
			t.Errorf("chart value %s (values.yaml) is not in the table under %q of %s", name, heading, page)
		}
	}
	for name, line := range documented {
		if _, ok := values[name]; !ok {
			t.Errorf("%s:%d documents chart value %s, which values.yaml does not have", page, line, name)
		}
	}
}

func refLeaves(values map[string]bool) map[string]bool {
	leaves := map[string]bool{}
	for k, leaf := range values {
		if leaf {
			leaves[k] = true
		}
	}
	return leaves
}

// refFlagMethods maps the flag.FlagSet methods that define a flag to the
// index of their name argument.
var refFlagMethods = map[string]int{
	"String": 0, "Bool": 0, "Int": 0, "Int64": 0, "Uint": 0, "Uint64": 0, "Float64": 0, "Duration": 0,
	"Func": 0, "BoolFunc": 0,
	"StringVar": 1, "BoolVar": 1, "IntVar": 1, "Int64Var": 1, "UintVar": 1, "Uint64Var": 1,
	"Float64Var": 1, "DurationVar": 1, "Var": 1, "TextVar": 1,
}

// refAgentFlags returns the flags the agent defines: the flag.FlagSet
// calls in cmd/volume-agent's agentFlags, and in any function of the
// package agentFlags passes its flag set to, read from the source with
// go/ast so that the agent need not be built.
func refAgentFlags(t *testing.T) map[string]token.Position {
	t.Helper()
	dir := filepath.Join(root, "cmd/volume-agent")
	fset := token.NewFileSet()
	funcs := map[string]*ast.FuncDecl{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil {
				funcs[fn.Name.Name] = fn
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	root, ok := funcs["agentFlags"]
	if !ok {
		t.Fatal("cmd/volume-agent has no func agentFlags: how does the agent define its flags now?")
	}
	flags := map[string]token.Position{}
	visited := map[string]bool{}
	var visit func(fn *ast.FuncDecl, fsName string)
	visit = func(fn *ast.FuncDecl, fsName string) {
		if visited[fn.Name.Name] {
			return
		}
		visited[fn.Name.Name] = true
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == fsName {
					if i, ok := refFlagMethods[sel.Sel.Name]; ok && i < len(call.Args) {
						lit, ok := call.Args[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							t.Errorf("%s: a flag named by an expression, not a string literal: extend refAgentFlags", fset.Position(call.Pos()))
							return true
						}
						name, _ := strconv.Unquote(lit.Value)
						flags[name] = fset.Position(call.Pos())
					}
				}
			}
			// A function of the package given the flag set defines flags too.
			if callee, ok := call.Fun.(*ast.Ident); ok {
				if next, ok := funcs[callee.Name]; ok {
					for i, arg := range call.Args {
						if id, ok := arg.(*ast.Ident); ok && id.Name == fsName {
							visit(next, refParamName(next, i))
						}
					}
				}
			}
			return true
		})
	}
	visit(root, "fs")
	if len(flags) < 10 {
		t.Fatalf("found %d flags in agentFlags; is its flag set still called fs?", len(flags))
	}
	return flags
}

// refParamName returns the name of the i-th parameter of fn.
func refParamName(fn *ast.FuncDecl, i int) string {
	for _, field := range fn.Type.Params.List {
		for _, name := range field.Names {
			if i == 0 {
				return name.Name
			}
			i--
		}
	}
	return ""
}

// TestFlagsDocumented checks that docs/flags.md's table names every flag
// the agent defines, and no flag it does not.
func TestFlagsDocumented(t *testing.T) {
	const page, heading = "docs/flags.md", "Flags"
	flags := refAgentFlags(t)
	documented := refTableNames(t, page, heading)
	for _, name := range mdSorted(refKeys(flags)) {
		if _, ok := documented["--"+name]; !ok {
			t.Errorf("%s: flag --%s is not in the table of %s", flags[name], name, page)
		}
	}
	for name, line := range documented {
		if _, ok := flags[strings.TrimPrefix(name, "--")]; !ok || !strings.HasPrefix(name, "--") {
			t.Errorf("%s:%d documents flag %s, which the agent does not define", page, line, name)
		}
	}
}

func refKeys[V any](m map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

var (
	// refSectionMention is a section named in prose, such as docs/deploying.md
	// "Chart values".
	refSectionMention = regexp.MustCompile(`\b((?:[\w.-]+/)*[\w.-]+\.md|README)(?:'s)?\s+"([^"]+)"`)
	// refCommentMarker is what a comment line starts with in Go and YAML.
	refCommentMarker = regexp.MustCompile(`^\s*(?://|#)\s?`)
)

// refSourceExts are the files that name sections of the docs: comments of
// code and configuration, and the prose of the markdown itself.
var refSourceExts = []string{".go", ".yaml", ".yml", ".json", ".sh", ".md"}

// TestSectionMentionsResolve checks that every section of the docs that a
// Go, YAML or shell file names in prose (`docs/deploying.md "Helm"`) is a heading of that file, so that a
// comment does not send the reader to a section that moved or was renamed.
func TestSectionMentionsResolve(t *testing.T) {
	headings := map[string]map[string]bool{}
	for _, d := range mdDocs(t) {
		headings[d.path] = mdAnchors(d)
	}
	mentions := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (mdSkipDirs[d.Name()] || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !slices.Contains(refSourceExts, filepath.Ext(path)) && d.Name() != "Makefile" && d.Name() != "Dockerfile" {
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		// Join the lines without their comment markers, so that a mention
		// broken over two comment lines is found.
		lines := strings.Split(string(text), "\n")
		var joined strings.Builder
		starts := make([]int, len(lines))
		for i, l := range lines {
			starts[i] = joined.Len()
			joined.WriteString(refCommentMarker.ReplaceAllString(l, ""))
			joined.WriteByte(' ')
		}
		for _, m := range refSectionMention.FindAllStringSubmatchIndex(joined.String(), -1) {
			s := joined.String()
			file, section := s[m[2]:m[3]], s[m[4]:m[5]]
			if file == "README" {
				file = "README.md"
			}
			line := 1
			for i, st := range starts {
				if st <= m[0] {
					line = i + 1
				}
			}
			mentions++
			have, ok := headings[filepath.ToSlash(filepath.Clean(file))]
			if !ok {
				t.Errorf("%s:%d names section %q of %s, which is no markdown file of the module (name it by its path from the module root)", rel, line, section, file)
				continue
			}
			if !have[mdAnchor(section)] {
				t.Errorf("%s:%d names section %q of %s, which has no such heading", rel, line, section, file)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if mentions == 0 {
		t.Fatal("no section mentions found: is the pattern right?")
	}
}
