package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The user documentation is the README and one page per task under docs/,
// linked to each other by relative links and #anchors. These tests keep
// every link landing on a file and a heading that exist, and every table
// whole, in every markdown file of the module, so that a heading renamed or
// a page moved fails here rather than in a reader's browser.

// mdDoc is one markdown file: its path relative to the module root and its
// lines with fenced code blocks blanked (they hold no links or headings).
type mdDoc struct {
	path  string
	lines []string
}

// mdSkipDirs are directories that hold no user documentation.
var mdSkipDirs = map[string]bool{".git": true, "testdata": true, "vendor": true, "node_modules": true}

// mdDocs reads every markdown file below the module root.
func mdDocs(t *testing.T) []mdDoc {
	t.Helper()
	var docs []mdDoc
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (mdSkipDirs[d.Name()] || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".md") {
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		docs = append(docs, mdDoc{path: filepath.ToSlash(rel), lines: mdBlankCode(strings.Split(string(text), "\n"))})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 3 {
		t.Fatalf("found %d markdown files below %s; is root right?", len(docs), root)
	}
	return docs
}

// mdBlankCode returns lines with the content of fenced code blocks, fences
// included, replaced by empty strings, so that line numbers stay right.
func mdBlankCode(lines []string) []string {
	out := make([]string, len(lines))
	fence := ""
	for i, l := range lines {
		trimmed := strings.TrimLeft(l, " ")
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
		case strings.HasPrefix(trimmed, "```"), strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
		default:
			out[i] = l
		}
	}
	return out
}

var (
	// mdHeading is an ATX heading.
	mdHeading = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	// mdLink is an inline link or image, [text](target "title").
	mdLink = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// mdRefDef is a reference definition, [label]: target.
	mdRefDef = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	// mdCodeSpan is an inline code span, whose content is not markdown.
	mdCodeSpan = regexp.MustCompile("`+[^`]*`+")
	// mdHTMLAnchor is an explicit anchor, <a name="x"> or id="x".
	mdHTMLAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// mdAnchor is the anchor GitHub gives a heading's text: lowercase, markdown
// links reduced to their text, every character but letters, digits,
// spaces, hyphens and underscores dropped, spaces turned into hyphens.
func mdAnchor(heading string) string {
	heading = mdLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// mdAnchors returns the anchors of a document's headings, a repeated one
// numbered as GitHub numbers it (x, x-1, x-2), and its explicit anchors.
func mdAnchors(d mdDoc) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, l := range d.lines {
		for _, m := range mdHTMLAnchor.FindAllStringSubmatch(l, -1) {
			anchors[m[1]] = true
		}
		m := mdHeading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a := mdAnchor(m[1])
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// mdTarget is one link of a document: where it is and what it names.
type mdTarget struct {
	line   int
	target string
}

// mdTargets returns the links of a document that point into the module:
// relative paths and #anchors, not URLs with a scheme.
func mdTargets(d mdDoc) []mdTarget {
	var out []mdTarget
	for i, l := range d.lines {
		var targets []string
		if m := mdRefDef.FindStringSubmatch(l); m != nil {
			targets = append(targets, m[1])
		}
		for _, m := range mdLink.FindAllStringSubmatch(mdCodeSpan.ReplaceAllString(l, "``"), -1) {
			targets = append(targets, m[2])
		}
		for _, tg := range targets {
			if tg == "" || strings.Contains(tg, "://") || strings.HasPrefix(tg, "mailto:") {
				continue
			}
			out = append(out, mdTarget{line: i + 1, target: tg})
		}
	}
	return out
}

// TestDocLinksResolve checks that every relative link of every markdown
// file names a file or directory that exists, and that every #anchor, on
// its own page or another markdown file, names a heading there.
func TestDocLinksResolve(t *testing.T) {
	docs := mdDocs(t)
	anchors := map[string]map[string]bool{}
	for _, d := range docs {
		anchors[d.path] = mdAnchors(d)
	}
	checked := 0
	for _, d := range docs {
		for _, l := range mdTargets(d) {
			checked++
			file, anchor, _ := strings.Cut(l.target, "#")
			target := d.path
			if file != "" {
				target = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(d.path), file)))
				if strings.HasPrefix(target, "../") {
					t.Errorf("%s:%d: link %s leaves the module", d.path, l.line, l.target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, target)); err != nil {
					t.Errorf("%s:%d: link %s: %s does not exist", d.path, l.line, l.target, target)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			have, ok := anchors[target]
			if !ok {
				t.Errorf("%s:%d: link %s has an anchor, but %s is not a markdown file", d.path, l.line, l.target, target)
				continue
			}
			if !have[anchor] {
				t.Errorf("%s:%d: link %s: %s has no heading with the anchor #%s (its anchors: %s)", d.path, l.line, l.target, target, anchor, strings.Join(mdSorted(have), ", "))
			}
		}
	}
	if checked == 0 {
		t.Fatal("no links found: is the link pattern right?")
	}
}

func mdSorted(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

var (
	// mdTableRow is a line that GitHub would take for a table row.
	mdTableRow = regexp.MustCompile(`^\s*\|`)
	// mdDelimiterRow is the line under a table's header.
	mdDelimiterRow = regexp.MustCompile(`^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$`)
)

// mdCells counts the cells of a table row: the pipes that are not escaped,
// less the leading and trailing ones. GitHub splits a row at every such
// pipe, inside code spans too.
func mdCells(row string) int {
	row = strings.TrimSpace(row)
	n := 0
	for i := 0; i < len(row); i++ {
		switch row[i] {
		case '\\':
			i++
		case '|':
			n++
		}
	}
	if strings.HasPrefix(row, "|") {
		n--
	}
	if strings.HasSuffix(row, "|") && !strings.HasSuffix(row, `\|`) && len(row) > 1 {
		n--
	}
	return n + 1
}

// TestDocTablesWhole checks every markdown table: each row has as many
// cells as its header, and no row stands apart from a table, as the rows
// after a blank line inside a table do (GitHub shows them as text).
func TestDocTablesWhole(t *testing.T) {
	tables := 0
	for _, d := range mdDocs(t) {
		inTable, cols := false, 0
		for i, l := range d.lines {
			if !mdTableRow.MatchString(l) {
				inTable = false
				continue
			}
			if inTable {
				if n := mdCells(l); n != cols {
					t.Errorf("%s:%d: table row has %d cells, its header %d", d.path, i+1, n, cols)
				}
				continue
			}
			if i+1 < len(d.lines) && mdDelimiterRow.MatchString(d.lines[i+1]) && strings.Contains(d.lines[i+1], "-") {
				inTable, cols = true, mdCells(l)
				tables++
				if n := mdCells(d.lines[i+1]); n != cols {
					t.Errorf("%s:%d: table delimiter row has %d cells, its header %d", d.path, i+2, n, cols)
				}
				continue
			}
			t.Errorf("%s:%d: a table row with no table header above it (a blank line inside a table?): %.60s", d.path, i+1, l)
		}
	}
	if tables == 0 {
		t.Fatal("no tables found: is the table pattern right?")
	}
}

func TestMdAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Raw block volumes (volumeMode Block)":         "raw-block-volumes-volumemode-block",
		"The node's identity (the default)":            "the-nodes-identity-the-default",
		"Fields of a pod in /v1/pods":                  "fields-of-a-pod-in-v1pods",
		"emptyDir sizeLimit":                           "emptydir-sizelimit",
		"Cluster mode: the cluster binds":              "cluster-mode-the-cluster-binds",
		"`--reclaim-delay` and [claims](claims.md)":    "--reclaim-delay-and-claims",
		"What is kept on release, and why":             "what-is-kept-on-release-and-why",
		"Command line: status, claims, wait, validate": "command-line-status-claims-wait-validate",
	} {
		if got := mdAnchor(heading); got != want {
			t.Errorf("mdAnchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

func TestMdCells(t *testing.T) {
	for row, want := range map[string]int{
		"| a | b |":                          2,
		"|---|---|---|":                      3,
		"| `status [-o table\\|wide]` | x |": 2,
		"| a | `x|y` |":                      3,
	} {
		if got := mdCells(row); got != want {
			t.Errorf("mdCells(%q) = %d, want %d", row, got, want)
		}
	}
}
