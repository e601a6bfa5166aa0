package main

import (
	"fmt"

	"github.com/volume-agent/volume-agent/internal/source/manifest"
)

const validateUsage = `Usage: volume-agent validate DIR

Checks a manifest directory as the agent reads it with --manifests DIR:
every *.yaml, *.yml and *.json file directly in DIR is parsed by the
agent's own parser, with its strict checks (an unknown or repeated field
is an error), and an object defined by two files is found. It mounts
nothing and contacts neither an agent nor an API server.

Prints one line per problem, "file:line: message" (TROUBLESHOOTING.md
explains each), or "DIR: N files, M objects, no problems". A running agent
rejects a file with a problem whole and keeps its last good content.

Exit codes:
  0  no problems
  1  problems were found, and printed
  2  bad arguments, or DIR cannot be read

Flags:
`

// exitProblems is validate's exit code when a file has a problem.
const exitProblems = 1

func runValidate(env cmdEnv, args []string) int {
	fs := newFlagSet(env, "validate", validateUsage)
	rest, code, done := parseArgs(fs, args)
	if done {
		return code
	}
	if len(rest) != 1 {
		return usageError(env, "validate", fmt.Errorf("want one manifest directory, got %d arguments", len(rest)))
	}
	dir := rest[0]
	report, err := manifest.Validate(dir)
	if err != nil {
		return failure(env, "validate", exitUsage, err)
	}
	for _, p := range report.Problems {
		fmt.Fprintln(env.stdout, p)
	}
	if len(report.Problems) > 0 {
		return exitProblems
	}
	fmt.Fprintf(env.stdout, "%s: %s, %s, no problems\n", dir,
		plural(report.Files, "file"), plural(report.Objects, "object"))
	return exitOK
}

// plural is "1 file", "2 files".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
