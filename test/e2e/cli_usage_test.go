package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestCLIUsage runs the built binary's help, --version, a mistyped
// command, a bad flag and wait by namespace/name against a real agent.
func TestCLIUsage(t *testing.T) {
	a, app, _ := startApp(t)
	addr := "--addr=" + a.addr

	t.Run("help", func(t *testing.T) {
		r := runCLI(t, "help")
		if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "volume-agent mounts the volumes") {
			t.Fatalf("exit %d, want 0 and the usage on stdout", r.code)
		}
		for _, want := range []string{"  volume-agent help [COMMAND]", "  -node-name string", "  -version\n", "  -manifests string"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("the usage lacks %q", want)
			}
		}
		for _, line := range strings.Split(r.stdout, "\n") {
			if strings.Count(line, "(default ") > 1 {
				t.Errorf("a default shown twice: %s", line)
			}
		}
		if flag := runCLI(t, "--help"); flag.code != 0 || flag.stderr != r.stdout {
			t.Errorf("--help: exit %d; want 0 and, on stderr, what help prints", flag.code)
		}
	})

	t.Run("help wait", func(t *testing.T) {
		r := runCLI(t, "help", "wait")
		if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "Usage: volume-agent wait POD") || !strings.Contains(r.stdout, "namespace/name") {
			t.Fatalf("exit %d, want 0 and wait's usage on stdout", r.code)
		}
	})

	t.Run("version", func(t *testing.T) {
		version := runCLI(t, "version")
		r := runCLI(t, "--version")
		if r.code != 0 || version.code != 0 || r.stdout != version.stdout || r.stderr != "" || !strings.HasPrefix(r.stdout, "version:") {
			t.Fatalf("--version: exit %d, stdout %q; want 0 and what version prints, %q", r.code, r.stdout, version.stdout)
		}
		help := runCLI(t, "version", "--help")
		if help.code != 0 || strings.Contains(help.stderr, "Flags:") || !strings.HasSuffix(help.stderr, "  2  bad arguments\n") {
			t.Errorf("version --help: exit %d; want 0 and no Flags: section", help.code)
		}
	})

	t.Run("mistyped command", func(t *testing.T) {
		r := runCLI(t, "stauts", addr)
		if want := "volume-agent: unknown command \"stauts\"; did you mean status?\n"; r.code != 2 || r.stdout != "" || r.stderr != want {
			t.Fatalf("exit %d, stderr %q; want 2 and %q", r.code, r.stderr, want)
		}
	})

	t.Run("bad flag said once", func(t *testing.T) {
		r := runCLI(t, "--manifests", a.manifests, "--bogus")
		if want := "volume-agent: flag provided but not defined: -bogus (see volume-agent --help)\n"; r.code != 2 || r.stdout != "" || r.stderr != want {
			t.Fatalf("exit %d, stderr %q; want 2 and %q", r.code, r.stderr, want)
		}
	})

	t.Run("mistyped flag and duration", func(t *testing.T) {
		r := runCLI(t, "--manifest", a.manifests)
		if want := "volume-agent: flag provided but not defined: -manifest; did you mean --manifests? (see volume-agent --help)\n"; r.code != 2 || r.stderr != want {
			t.Errorf("exit %d, stderr %q; want 2 and %q", r.code, r.stderr, want)
		}
		r = runCLI(t, "--manifests", a.manifests, "--reclaim-delay", "10")
		if want := `volume-agent: --reclaim-delay "10": want a duration such as 10m or 30s`; r.code != 2 || !strings.HasPrefix(r.stderr, want) {
			t.Errorf("exit %d, stderr %q; want 2 and %q", r.code, r.stderr, want)
		}
	})

	t.Run("status port in use", func(t *testing.T) {
		r := runCLI(t, "--manifests", t.TempDir(), "--root-dir", t.TempDir(), "--node-name", "node-1", "--status-addr", a.addr, "--log-format", "json")
		want := "--status-addr " + a.addr + ": the port is in use: another volume-agent may be running (volume-agent status --addr " + a.addr + " answers if so"
		if r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Fatalf("exit %d, stderr %q; want 1 and %q", r.code, r.stderr, want)
		}
	})

	t.Run("wait namespace/name", func(t *testing.T) {
		r := runCLI(t, "wait", "default/app", addr, "--timeout", "10s")
		if want := "pod default/app (" + app.UID + "): volumes ready\n"; r.code != 0 || r.stdout != want {
			t.Fatalf("exit %d, stdout %q; want 0 and %q", r.code, r.stdout, want)
		}
	})

	t.Run("wait namespace/name of a pod to come", func(t *testing.T) {
		done := make(chan cliRun, 1)
		go func() { done <- runCLI(t, "wait", "team/late", addr, "--timeout", "30s") }()
		time.Sleep(300 * time.Millisecond) // the pod is looked up, and not listed
		a.writeManifest("late-config.yaml", lateConfig)
		a.writeManifest("late.yaml", latePod)
		r := <-done
		if r.code != 0 || r.stdout != "pod team/late (late-1): volumes ready\n" || r.took > 15*time.Second {
			t.Fatalf("exit %d after %v, stdout %q; want 0 soon after the pod came", r.code, r.took, r.stdout)
		}
	})

	t.Run("wait namespace/name unknown", func(t *testing.T) {
		r := runCLI(t, "wait", "team/nope", addr, "--timeout", "1s")
		if r.code != 4 || !strings.Contains(r.stderr, "does not know pod team/nope") || r.took < time.Second {
			t.Fatalf("exit %d after %v; want 4 after 1s, saying the pod is unknown", r.code, r.took)
		}
	})

	t.Run("wait not a namespace/name", func(t *testing.T) {
		r := runCLI(t, "wait", "Default/App", addr)
		if r.code != 2 || !strings.Contains(r.stderr, `pod "Default/App": want its UID, or its namespace/name`) {
			t.Fatalf("exit %d; want 2 saying what wait takes", r.code)
		}
	})
}
