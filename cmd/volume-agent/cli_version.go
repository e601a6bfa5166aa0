package main

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"
)

const versionUsage = `Usage: volume-agent version

Prints the module version of this binary, the VCS revision and commit time
it was built from ("modified" when the working tree had changes), and the
Go version and platform it was built with.

Exit codes:
  0  the version was printed
  2  bad arguments

Flags:
`

func runVersion(env cmdEnv, args []string) int {
	fs := newFlagSet(env, "version", versionUsage)
	rest, code, done := parseArgs(fs, args)
	if done {
		return code
	}
	if len(rest) > 0 {
		return usageError(env, "version", fmt.Errorf("unexpected arguments: %s", strings.Join(rest, " ")))
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = &debug.BuildInfo{GoVersion: runtime.Version()}
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 0, 1, ' ', 0)
	for _, line := range versionLines(info) {
		fmt.Fprintf(tw, "%s:\t%s\n", line[0], line[1])
	}
	_ = tw.Flush()
	return exitOK
}

// versionLines returns the name and value of each line of the version.
func versionLines(info *debug.BuildInfo) [][2]string {
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	revision := settings["vcs.revision"]
	switch {
	case revision == "":
		revision = "unknown (built without VCS information)"
	case settings["vcs.modified"] == "true":
		revision += " (modified)"
	}
	lines := [][2]string{
		{"version", cmp.Or(info.Main.Version, "unknown")},
		{"revision", revision},
	}
	if t := settings["vcs.time"]; t != "" {
		lines = append(lines, [2]string{"commit time", t})
	}
	return append(lines,
		[2]string{"go", info.GoVersion},
		[2]string{"platform", runtime.GOOS + "/" + runtime.GOARCH})
}
