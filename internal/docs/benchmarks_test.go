package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// adopterHeading begins BENCHMARKS.md's first section, the one screen for
// someone deciding whether to adopt the agent; it ends at the next "## ".
const adopterHeading = "## For adopters"

var (
	// internalReference is an issue or run number of the project's own
	// tracker or notebook: meaningless to a reader, who needs the change
	// named. A "-runs 7" argument of a script is no such reference.
	internalReference = regexp.MustCompile(`(?i)(^|[^-\w])(issues?|runs?) #?\d+`)
	adopterDate       = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}( \d{2}:\d{2}(–\d{2}:\d{2})?)?$`)
	adopterCommit     = regexp.MustCompile("^`[0-9a-f]{7,40}`( \\(.+\\))?$")
	adopterCommand    = regexp.MustCompile("`[^`]+`")
)

// benchmarkPages are BENCHMARKS.md and the lab notebook's pages.
func benchmarkPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "benchmarks", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("docs/benchmarks/ holds no page: the lab notebook is gone")
	}
	return append([]string{filepath.Join(root, "BENCHMARKS.md")}, pages...)
}

func TestBenchmarksNameNoInternalNumbers(t *testing.T) {
	for _, page := range benchmarkPages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(text), "\n") {
			if m := internalReference.FindString(line); m != "" {
				t.Errorf("%s:%d: %q is an internal issue or run number: name the change (or the run's date and commit) instead", benchPageName(page), i+1, strings.TrimSpace(m))
			}
		}
	}
}

// adopterRow is one row of a table of the adopter screen, by column name.
type adopterRow struct {
	line  int
	cells map[string]string
}

// adopterRows returns the rows of every table in the adopter section,
// keyed by their header's column names (lowercase).
func adopterRows(t *testing.T, text string) []adopterRow {
	t.Helper()
	lines := strings.Split(text, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, adopterHeading) {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("BENCHMARKS.md has no %q section", adopterHeading)
	}
	var rows []adopterRow
	var header []string
	for i := start + 1; i < len(lines) && !strings.HasPrefix(lines[i], "## "); i++ {
		l := strings.TrimSpace(lines[i])
		switch {
		case !strings.HasPrefix(l, "|"):
			header = nil
		case header == nil:
			header = benchTableCells(l)
			for j := range header {
				header[j] = strings.ToLower(header[j])
			}
		case strings.HasPrefix(l, "|---") || strings.HasPrefix(l, "| ---"):
		default:
			cells := benchTableCells(l)
			row := adopterRow{line: i + 1, cells: map[string]string{}}
			for j, h := range header {
				if j < len(cells) {
					row.cells[h] = cells[j]
				}
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// benchTableCells splits a Markdown table row into its trimmed cells.
func benchTableCells(line string) []string {
	parts := strings.Split(strings.Trim(line, "|"), "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// TestBenchmarksAdopterFiguresAreDated checks that every figure of the
// adopter screen says when (date), on what code (commit) and how (the
// command) it was measured, so that a reader can tell a current figure
// from a stale one and measure it again.
func TestBenchmarksAdopterFiguresAreDated(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(root, "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := adopterRows(t, string(text))
	if len(rows) < 3 {
		t.Fatalf("the adopter section has %d figures in tables; want its figures in tables with Date, Commit and Command columns", len(rows))
	}
	for _, r := range rows {
		for _, col := range []string{"date", "commit", "command"} {
			if _, ok := r.cells[col]; !ok {
				t.Errorf("BENCHMARKS.md:%d: the table has no %q column", r.line, col)
			}
		}
		if d := r.cells["date"]; !adopterDate.MatchString(d) {
			t.Errorf("BENCHMARKS.md:%d: date %q: want YYYY-MM-DD, optionally with the UTC time", r.line, d)
		}
		if c := r.cells["commit"]; !adopterCommit.MatchString(c) {
			t.Errorf("BENCHMARKS.md:%d: commit %q: want the agent's commit as `abc1234`", r.line, c)
		}
		if c := r.cells["command"]; !adopterCommand.MatchString(c) {
			t.Errorf("BENCHMARKS.md:%d: command %q: want the command that measured it, in backquotes", r.line, c)
		}
	}
}

// benchPageName names a page relative to the module root.
func benchPageName(path string) string {
	if r, err := filepath.Rel(root, path); err == nil {
		return r
	}
	return path
}
