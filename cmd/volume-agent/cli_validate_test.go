package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runValidateCmd runs volume-agent validate with args.
func runValidateCmd(args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	code, _ = runSubcommand(append([]string{"validate"}, args...), cmdEnv{stdout: &out, stderr: &errOut})
	return out.String(), errOut.String(), code
}

func writeValidated(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

const validatePod = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers: [{name: app, image: nginx}]\n"

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	writeValidated(t, dir, "web.yaml", validatePod)
	stdout, stderr, code := runValidateCmd(dir)
	if want := dir + ": 1 file, 1 object, no problems\n"; code != exitOK || stdout != want || stderr != "" {
		t.Errorf("clean directory: exit %d, stdout %q, stderr %q; want 0 and %q", code, stdout, stderr, want)
	}

	writeValidated(t, dir, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  port: 8080\n")
	writeValidated(t, dir, "typo.yaml", strings.Replace(validatePod, "name: web", "name: other", 1)+
		"  volumes:\n  - name: cache\n    emptyDir: {sizeLimt: 1Gi}\n")
	stdout, _, code = runValidateCmd(dir)
	want := filepath.Join(dir, "cm.yaml") + `:5: data["port"]: want a string, got a number (write the value in quotes)` + "\n" +
		filepath.Join(dir, "typo.yaml") + ":8: spec.volumes[0].emptyDir.sizeLimt: unknown field (did you mean sizeLimit?)\n"
	if code != exitProblems || stdout != want {
		t.Errorf("directory with problems: exit %d, stdout\n%s\nwant exit 1 and\n%s", code, stdout, want)
	}
}

func TestValidateUsage(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{nil, exitUsage, "volume-agent validate: want one manifest directory, got 0 arguments (see volume-agent validate --help)\n"},
		{[]string{dir, dir}, exitUsage, "volume-agent validate: want one manifest directory, got 2 arguments (see volume-agent validate --help)\n"},
		{[]string{"--strict", dir}, exitUsage, "volume-agent validate: flag provided but not defined: -strict (see volume-agent validate --help)\n"},
		{[]string{filepath.Join(dir, "nope")}, exitUsage, "volume-agent validate: read manifest directory: open " + filepath.Join(dir, "nope") + ": no such file or directory\n"},
		{[]string{"--help"}, exitOK, "Usage: volume-agent validate DIR\n"},
	} {
		stdout, stderr, code := runValidateCmd(tc.args...)
		if code != tc.code || stdout != "" || !strings.HasPrefix(stderr, tc.stderr) {
			t.Errorf("validate %q: exit %d, stdout %q, stderr %q; want exit %d and stderr starting %q", tc.args, code, stdout, stderr, tc.code, tc.stderr)
		}
	}
	if _, stderr, _ := runValidateCmd("--help"); !strings.Contains(stderr, "Exit codes:\n  0  no problems\n  1  problems were found") {
		t.Errorf("--help does not list the exit codes:\n%s", stderr)
	}
}
