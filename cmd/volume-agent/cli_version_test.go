package main

import (
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
)

func TestVersionLines(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "7c87c26f0c1b2e3d4a5b6c7d8e9f00112233aabb"},
			{Key: "vcs.time", Value: "2026-11-23T19:00:00Z"}, {Key: "vcs.modified", Value: modified}}
	}
	for _, tc := range []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"release", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: vcs("false")},
			"version: v1.2.3\nrevision: 7c87c26f0c1b2e3d4a5b6c7d8e9f00112233aabb\ncommit time: 2026-11-23T19:00:00Z\ngo: go1.26.8\nplatform: " + platform},
		{"modified tree", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs("true")},
			"version: (devel)\nrevision: 7c87c26f0c1b2e3d4a5b6c7d8e9f00112233aabb (modified)\ncommit time: 2026-11-23T19:00:00Z\ngo: go1.26.8\nplatform: " + platform},
		{"no VCS information", debug.BuildInfo{GoVersion: "go1.26.8"},
			"version: unknown\nrevision: unknown (built without VCS information)\ngo: go1.26.8\nplatform: " + platform},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lines []string
			for _, l := range versionLines(&tc.info) {
				lines = append(lines, l[0]+": "+l[1])
			}
			if got := strings.Join(lines, "\n"); got != tc.want {
				t.Errorf("version\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestVersionOfThisBinary: the version reads the test binary's own build
// information, aligned.
func TestVersionOfThisBinary(t *testing.T) {
	out := runCmd(recordedAt, "version")
	goLine := regexp.MustCompile(`\ngo: +` + regexp.QuoteMeta(runtime.Version()) + "\n")
	if out.code != exitOK || !strings.HasPrefix(out.stdout, "version: ") || !goLine.MatchString(out.stdout) {
		t.Fatalf("exit %d, stdout\n%s", out.code, out.stdout)
	}
	if out := runCmd(recordedAt, "version", "--short"); out.code != exitUsage {
		t.Errorf("version --short: exit %d, want %d", out.code, exitUsage)
	}
}

// TestOnlySubcommandsAreTaken: the agent's flags, no arguments, a path and
// the internal hostPath checker are not subcommands (a mistyped one is
// taken, to say so: TestUnknownCommand).
func TestOnlySubcommandsAreTaken(t *testing.T) {
	for _, args := range [][]string{nil, {"--manifests", "/m"}, {"-h"}, {"--version"}, {hostpath.CheckerArg, "/x"}, {hostpath.ServerArg}, {"./manifests"}, {"/etc/m"}} {
		if _, ok := runSubcommand(args, cmdEnv{}); ok {
			t.Errorf("%q was taken for a subcommand", args)
		}
	}
}
