package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// versionHelp is all of volume-agent version --help: no "Flags:" heading,
// as version has none.
const versionHelp = `Usage: volume-agent version

Prints the module version of this binary, the VCS revision and commit time
it was built from ("modified" when the working tree had changes), and the
Go version and platform it was built with.

Exit codes:
  0  the version was printed
  2  bad arguments
`

// agentUsage is what volume-agent help prints.
func agentUsage() string {
	var b bytes.Buffer
	writeAgentUsage(&b)
	return b.String()
}

func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		wantCode   int
		wantStdout string // all of it
		wantStderr string // all of it
	}{
		{[]string{"help"}, exitOK, agentUsage(), ""},
		{[]string{"help", "version"}, exitOK, versionHelp, ""},
		{[]string{"version", "--help"}, exitOK, "", versionHelp},
		{[]string{"version", "-h"}, exitOK, "", versionHelp},
		{[]string{"help", "stauts"}, exitUsage, "", "volume-agent help: unknown command \"stauts\"; did you mean status?\n"},
		{[]string{"help", "a", "b"}, exitUsage, "", "volume-agent help: want at most one command, got 2 arguments (see volume-agent help --help)\n"},
		{[]string{"help", "--bogus"}, exitUsage, "", "volume-agent help: flag provided but not defined: -bogus (see volume-agent help --help)\n"},
		{[]string{"help", "help"}, exitOK, helpUsage[:len(helpUsage)-len("\nFlags:\n")], ""},
	} {
		out := runCmd(recordedAt, tc.args...)
		if out.code != tc.wantCode || out.stdout != tc.wantStdout || out.stderr != tc.wantStderr {
			t.Errorf("%q: exit %d, stdout\n%s\nstderr\n%s\nwant exit %d, stdout\n%s\nstderr\n%s", tc.args, out.code, out.stdout, out.stderr,
				tc.wantCode, tc.wantStdout, tc.wantStderr)
		}
	}
}

// TestHelpOfEachCommand: volume-agent help COMMAND prints, on stdout, what
// COMMAND --help prints on stderr.
func TestHelpOfEachCommand(t *testing.T) {
	for _, name := range subcommands {
		help := runCmd(recordedAt, "help", name)
		flag := runCmd(recordedAt, name, "--help")
		if help.code != exitOK || help.stderr != "" || !strings.HasPrefix(help.stdout, "Usage: volume-agent "+name) {
			t.Errorf("help %s: exit %d, stdout %q, stderr %q", name, help.code, help.stdout, help.stderr)
		}
		if flag.code != exitOK || flag.stdout != "" || flag.stderr != help.stdout {
			t.Errorf("%s --help: exit %d, stdout %q, stderr %q; want on stderr what help %s prints", name, flag.code, flag.stdout, flag.stderr, name)
		}
		if strings.HasSuffix(help.stdout, "Flags:\n") {
			t.Errorf("help %s ends with an empty Flags: section", name)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	const list = `the commands are status, claims, wait, validate, version and help; the agent itself takes flags only (see volume-agent help)`
	for _, tc := range []struct{ arg, want string }{
		{"stauts", `unknown command "stauts"; did you mean status?`},
		{"Status", `unknown command "Status"; did you mean status?`},
		{"stat", `unknown command "stat"; did you mean status?`},
		{"wiat", `unknown command "wiat"; did you mean wait?`},
		{"claim", `unknown command "claim"; did you mean claims?`},
		{"verison", `unknown command "verison"; did you mean version?`},
		{"hlep", `unknown command "hlep"; did you mean help?`},
		{"foo", `unknown command "foo": ` + list},
		{"run", `unknown command "run": ` + list},
	} {
		out := runCmd(recordedAt, tc.arg, "--manifests", "/m")
		if want := "volume-agent: " + tc.want + "\n"; out.code != exitUsage || out.stdout != "" || out.stderr != want {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and %q", tc.arg, out.code, out.stderr, want)
		}
	}
}

func TestClosest(t *testing.T) {
	names := []string{"status", "claims", "wait", "version", "help"}
	for _, tc := range []struct {
		word string
		want []string
	}{
		{"status", []string{"status"}},
		{"sttaus", []string{"status"}}, // one swap, then nothing else
		{"statsu", []string{"status"}},
		{"s", []string{"status"}}, // a prefix
		{"v", []string{"version"}},
		{"wat", []string{"wait"}},
		{"hel", []string{"help"}},
		{"xyz", nil},
		{"statuses", []string{"status"}},
		{"manifests", nil},
	} {
		if got := closest(tc.word, names); !slices.Equal(got, tc.want) {
			t.Errorf("closest(%q) = %q, want %q", tc.word, got, tc.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "wait", 4}, {"wait", "wait", 0}, {"stauts", "status", 1}, {"wiat", "wait", 1},
		{"stat", "status", 2}, {"claim", "claims", 1}, {"kitten", "sitting", 3}, {"ca", "abc", 3},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestSubcommandsListsEveryCase holds the names suggested and helped with
// to the cases of runSubcommand: a subcommand added there must be added
// to subcommands too.
func TestSubcommandsListsEveryCase(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "cli.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cases []string
	ast.Inspect(f, func(n ast.Node) bool {
		fn, ok := n.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "runSubcommand" {
			return true
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if cc, ok := n.(*ast.CaseClause); ok {
				for _, e := range cc.List {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						name, _ := strconv.Unquote(lit.Value)
						cases = append(cases, name)
					}
				}
			}
			return true
		})
		return false
	})
	slices.Sort(cases)
	listed := slices.Sorted(slices.Values(subcommands))
	if len(cases) == 0 || !slices.Equal(cases, listed) {
		t.Errorf("runSubcommand takes %q, subcommands lists %q", cases, listed)
	}
	for _, name := range subcommands {
		if code := runCmd(recordedAt, name, "--help").code; code != exitOK {
			t.Errorf("%s --help: exit %d", name, code)
		}
	}
}

// TestAgentUsage: each flag is listed once, with its default once, and
// --version is among them.
func TestAgentUsage(t *testing.T) {
	text := agentUsage()
	if !strings.HasPrefix(text, usage) {
		t.Fatalf("the usage does not start with the synopsis:\n%s", text)
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.Count(line, "(default ") > 1 {
			t.Errorf("a default shown twice: %s", line)
		}
	}
	for _, want := range []string{
		"  -version\n    \tprint the version, as volume-agent version does, and exit\n",
		"(default $NODE_NAME, else the hostname)\n",
		"(default $POD_NAMESPACE, else \"default\")\n",
		"  volume-agent wait UID|NAMESPACE/NAME [flags]",
		"  volume-agent help [COMMAND]",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the usage lacks %q:\n%s", want, text)
		}
	}
	flags := regexp.MustCompile(`(?m)^  -[a-z-]+`).FindAllString(text, -1)
	if len(flags) < 20 || len(slices.Compact(slices.Sorted(slices.Values(flags)))) != len(flags) {
		t.Errorf("flags %q: want each once", flags)
	}
}

// TestRun covers what the agent's command line answers without running
// the agent: --help, --version and bad flags, each said once.
func TestRun(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a pod: no cluster without --kubeconfig
	version := runCmd(recordedAt, "version").stdout
	for _, tc := range []struct {
		args       []string
		wantCode   int
		wantStdout string // all of it
		wantStderr string // all of it
	}{
		{[]string{"--help"}, exitOK, "", agentUsage()},
		{[]string{"-h"}, exitOK, "", agentUsage()},
		{[]string{"--version"}, exitOK, version, ""},
		{[]string{"-version"}, exitOK, version, ""},
		{[]string{"--version", "--node-name", "x"}, exitOK, version, ""}, // nothing to serve, yet not refused
		{[]string{"--bogus"}, exitUsage, "", "volume-agent: flag provided but not defined: -bogus (see volume-agent --help)\n"},
		{[]string{"--manifests", "/m", "--reclaim-delay", "soon"}, exitUsage, "",
			"volume-agent: --reclaim-delay \"soon\": want a duration such as 10m or 30s (a number with a unit: ms, s, m or h) (see volume-agent --help)\n"},
		{[]string{"--manifests"}, exitUsage, "", "volume-agent: flag needs an argument: -manifests (see volume-agent --help)\n"},
		{[]string{"--manifests", "/m", "status"}, exitUsage, "", "volume-agent: unexpected arguments: status\n"},
		{[]string{"--node-name", "n"}, exitUsage, "", "volume-agent: nothing to serve: give --manifests DIR and/or --kubeconfig FILE (see --help)\n"},
		{[]string{"--manifests", "/m", "--log-format", "xml"}, exitUsage, "", "volume-agent: --log-format \"xml\": want console or json\n"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(cmdEnv{stdout: &stdout, stderr: &stderr, now: time.Now}, tc.args)
		if code != tc.wantCode || stdout.String() != tc.wantStdout || stderr.String() != tc.wantStderr {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr %q", tc.args, code, stdout.String(), stderr.String(),
				tc.wantCode, tc.wantStdout, tc.wantStderr)
		}
	}
}
