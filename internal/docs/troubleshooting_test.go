package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// internalMessages are messages of userFacingDirs that no operator can
// cause: they report a programming error of the agent's own wiring (a
// required Config field left empty, a Run started twice, a type the
// agent's own cache cannot hold), which main never triggers. They need no
// entry; each must still occur in the code.
var internalMessages = map[string]string{
	"binder: Inner is required":                                                      "Config validation; main sets it",
	"binder: Logger is required":                                                     "Config validation; main sets it",
	"binder: NodeName is required":                                                   "Config validation; flags refuse an empty node name first",
	"binder: StatePath is required":                                                  "Config validation; main sets it",
	"binder: Provisioners[…] is nil":                                                 "Config validation; main sets it",
	"binder: two Provisioners are named …":                                           "Config validation; --provisioners refuses a name given twice first",
	"binder: Run is already running":                                                 "a second Run; main runs it once",
	"binder: ReclaimDelay … is negative":                                             "Config validation; --reclaim-delay refuses a negative delay first",
	"storagecapacity: Client, Driver, Node, Namespace, Room and Logger are required": "Config validation; main sets them",
	"provisioner: Config.Client is required":                                         "Config validation; main sets it",
	"provisioner: Config.Logger is required":                                         "Config validation; main sets it",
	"provisioner: Config.ReclaimDelay is negative":                                   "Config validation; --reclaim-delay refuses a negative delay first",
	"provisioner: Config.Provisioner is required":                                    "Config validation; main sets it",
	"local provisioner: a mounter and a logger are required":                         "Config validation; main sets them",
	"local provisioner: node name is required":                                       "Config validation; flags refuse an empty node name first",
	"provision: the request has no claim or no class":                                "the controller and the binder always send both",
	"nfs-subdir provisioner: RootDir and Exports are required":                       "Config validation; main sets them",
	"apiserver source: Client, NodeName and Logger are required":                     "Config validation; main sets them",
	"manifest source: Dir is required":                                               "Config validation; main passes --manifests only when set",
	"manifest source: Logger is required":                                            "Config validation; main sets it",
	"manifest source: NodeName is required":                                          "Config validation; flags refuse an empty node name first",
	"manifest source: Resync … is negative":                                          "Config validation; main leaves the default",
	"manifest source is already running":                                             "a second Run; main runs it once",
	"plugin … registered twice":                                                      "plugins.Default registers each plugin once",
	"unsupported projection source":                                                  "validation refuses such a source before set-up",
	"… …: unexpected type …":                                                         "an informer cache holding a type it was not made for",
	"base directory":                                                                 "a sentinel joined to storagedir errors that are documented",
	"remove …: no owner given":                                                       "storagedir.RemoveMarked's argument check; nfssubdir always passes the PV name",
	"no MemTotal in /proc/meminfo":                                                   "never shown: the machine's memory is then left out of the defaults",
	"tree deeper than the mount scan goes":                                           "never shown: mount.MountsUnder then reads the mount table instead",
	"capacity: Root and Logger are required":                                         "Config validation; the provisioner sets them",
	"losetup attached … as …, not a loop device":                                     "losetup --show prints the device it attached; never seen",
	"expand the storage of PersistentVolume …: provisioner … cannot expand volumes":  "plan asks only provisioners that are Expanders to expand",
	"no qgroup limit":                                                                "never shown: usage then walks the subvolume as a plain directory",
	"btrfs quotas are not enabled":                                                   "never shown: a category matched by errors.Is on btrfs(8)'s own error, whose text is shown",
	"btrfs subvolume holds another subvolume":                                        "never shown: a category matched by errors.Is on btrfs(8)'s own error, whose text is shown",
	"btrfs: path … is not absolute":                                                  "a guard: emptydir checks its path first, capacity resolves its root",
}

// A TROUBLESHOOTING.md entry is a line "**Symptom**", the symptoms as lines
// "- `text`", then "**Cause:**", "**Fix:**" and "**Confirm:**" paragraphs up
// to the next entry or heading. A symptom is the exact text an operator
// sees; a tag after it says how the test finds it in the code:
//
//   - no tag: a message of the code (see collect), compared exactly;
//   - (text): a text the code builds otherwise (an info log line, a claim's
//     reason, a status string): its fixed parts, in order, must occur in
//     one string literal (or concatenation of literals) of a non-test
//     file under cmd/ or internal/;
//   - (metric): an expression whose volume_agent_… names must each be a
//     metric the agent registers;
//   - (from MODULE): a text of a dependency, found as (text) is in that
//     module's non-test files.
const symptomHead = "**Symptom**"

var (
	symptomLine = regexp.MustCompile("^- `(.+)`(?: \\((text|metric|from [^)]+)\\))?$")
	headingLine = regexp.MustCompile(`^#+ `)
	metricName  = regexp.MustCompile(`volume_agent_\w+`)
)

// symptom is one quoted text of an entry, with its tag.
type symptom struct {
	text string
	tag  string
}

// entry is one symptom entry of TROUBLESHOOTING.md with its text.
type entry struct {
	line     int
	symptoms []symptom
	body     string
}

// entries parses the symptom entries of text.
func entries(text string) []entry {
	var out []entry
	inSymptoms, inFence := false, false
	for i, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			inFence = !inFence
		case inFence: // an example, such as the template of an entry
		case line == symptomHead:
			out = append(out, entry{line: i + 1})
			inSymptoms = true
		case headingLine.MatchString(line):
			inSymptoms = false
			out = append(out, entry{}) // ends the body of the last entry
		case inSymptoms && strings.TrimSpace(line) == "":
		case inSymptoms && symptomLine.MatchString(line):
			m := symptomLine.FindStringSubmatch(line)
			out[len(out)-1].symptoms = append(out[len(out)-1].symptoms, symptom{text: m[1], tag: m[2]})
		default:
			inSymptoms = false
			if len(out) > 0 {
				out[len(out)-1].body += line + "\n"
			}
		}
	}
	var kept []entry
	for _, e := range out {
		if e.line > 0 {
			kept = append(kept, e)
		}
	}
	return kept
}

// literals returns the normalised string literals, and concatenations of
// literals, of every non-test Go file under dirs.
func literals(t *testing.T, dirs ...string) []string {
	t.Helper()
	var out []string
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				return err
			}
			consts := stringConsts(f)
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.BasicLit, *ast.BinaryExpr:
					if s, ok := render(n.(ast.Expr), consts, nil); ok {
						out = append(out, normalise(s))
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// inLiterals reports whether the fixed parts of text (between its "…")
// occur, in order, in one of lits.
func inLiterals(text string, lits []string) bool {
	parts := strings.Split(normalise(text), "…")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	re := regexp.MustCompile(strings.Join(parts, ".*"))
	for _, l := range lits {
		if re.MatchString(l) {
			return true
		}
	}
	return false
}

// moduleDir is where the Go command keeps a dependency's source.
func moduleDir(t *testing.T, module string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("find module %s: %v (run go mod download)", module, err)
	}
	return strings.TrimSpace(string(out))
}

// symptomFinder checks a symptom against the code, by its tag.
type symptomFinder struct {
	t        *testing.T
	messages map[string]bool
	code     []string
	modules  map[string][]string
	metrics  map[string]family
}

// missing says why s is not found in the code, or "" when it is.
func (f *symptomFinder) missing(s symptom) string {
	switch s.tag {
	case "":
		if !f.messages[s.text] {
			return "no longer occurs in the code as a message (if it is built otherwise, tag it (text))"
		}
	case "text":
		if !inLiterals(s.text, f.code) {
			return "is in no string literal of the code (its parts between … must be in one, in order)"
		}
	case "metric":
		names := metricName.FindAllString(s.text, -1)
		if len(names) == 0 {
			return "names no volume_agent_… metric"
		}
		for _, n := range names {
			if _, ok := f.metrics[n]; !ok {
				return "names " + n + ", which the agent does not register"
			}
		}
	default:
		module := strings.TrimPrefix(s.tag, "from ")
		if f.modules[module] == nil {
			f.modules[module] = literals(f.t, moduleDir(f.t, module))
		}
		if !inLiterals(s.text, f.modules[module]) {
			return "is in no string literal of " + module
		}
	}
	return ""
}

func TestTroubleshootingMatchesCode(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(root, "TROUBLESHOOTING.md"))
	if err != nil {
		t.Fatal(err)
	}
	inCode := map[string]bool{}
	for _, m := range collect(t, "cmd", "internal") {
		inCode[m.text] = true
	}
	metrics, _ := registered(t)
	find := &symptomFinder{t: t, messages: inCode, modules: map[string][]string{}, metrics: metrics,
		code: literals(t, filepath.Join(root, "cmd"), filepath.Join(root, "internal"))}
	documented := map[string]int{}
	all := entries(string(text))
	for _, e := range all {
		if len(e.symptoms) == 0 {
			t.Errorf("TROUBLESHOOTING.md:%d: %s is followed by no symptom (\"- `text`\")", e.line, symptomHead)
			continue
		}
		for _, part := range []string{"**Cause:**", "**Fix:**", "**Confirm:**"} {
			if !strings.Contains(e.body, part) {
				t.Errorf("TROUBLESHOOTING.md:%d: the entry of %q says no %s", e.line, e.symptoms[0].text, part)
			}
		}
		for _, s := range e.symptoms {
			if line, dup := documented[s.text]; dup {
				t.Errorf("TROUBLESHOOTING.md:%d: %q is documented again (first at line %d)", e.line, s.text, line)
			}
			documented[s.text] = e.line
			// (a) Every documented symptom still occurs in the code.
			if why := find.missing(s); why != "" {
				t.Errorf("TROUBLESHOOTING.md:%d: symptom %q %s", e.line, s.text, why)
			}
		}
	}
	if len(all) < 100 {
		t.Fatalf("TROUBLESHOOTING.md has %d symptom entries; the parser or the file lost them", len(all))
	}
	// (b) Every user-facing message of userFacingDirs is documented.
	userFacing := map[string]bool{}
	for _, m := range collect(t, userFacingDirs...) {
		switch m.kind {
		case kindWrapper:
			continue
		case kindUnreadable:
			t.Errorf("%s: the message of a warn or error log line, %s, is not a constant: give it a constant message (and the rest in fields), so that it can be documented and checked", m.pos, m.text)
			continue
		}
		userFacing[m.text] = true
		if _, ok := documented[m.text]; !ok && internalMessages[m.text] == "" {
			t.Errorf("%s: %s message %q is not in TROUBLESHOOTING.md (add an entry: %s, \"- `%s`\", **Cause:**, **Fix:** and **Confirm:**)", m.pos, m.kind, m.text, symptomHead, m.text)
		}
	}
	for m := range internalMessages {
		if !userFacing[m] {
			t.Errorf("internalMessages lists %q, which no longer occurs in the code", m)
		}
	}
}
