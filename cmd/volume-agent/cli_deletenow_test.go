package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// deleteNowAnswer is a GET /v1/claims answer with released storage in
// each step, one claim name released twice, and one archiving class.
const deleteNowAnswer = `{"claims": [
 {"namespace": "default", "name": "inplace", "uid": "u1", "phase": "Released", "pv": "pvc-1", "reclaimPolicy": "Delete", "pendingDeletion": {"step": "Released"}},
 {"namespace": "default", "name": "kept", "uid": "u2", "phase": "Released", "pv": "pv-static", "reclaimPolicy": "Retain"},
 {"namespace": "default", "name": "twice", "uid": "u3", "phase": "Released", "pv": "pvc-3", "reclaimPolicy": "Delete",
  "pendingDeletion": {"step": "Aside", "deleteAfter": "2026-11-26T09:00:00Z"}},
 {"namespace": "default", "name": "twice", "uid": "u4", "phase": "Released", "pv": "pvc-4", "reclaimPolicy": "Delete",
  "pendingDeletion": {"step": "Aside", "deleteAfter": "2026-11-26T09:00:00Z"}},
 {"namespace": "default", "name": "archived", "uid": "u5", "phase": "Released", "pv": "pvc-5", "reclaimPolicy": "Delete",
  "pendingDeletion": {"step": "Aside", "deleteAfter": "2026-11-26T09:00:00Z", "archive": true}},
 {"namespace": "default", "name": "going", "uid": "u6", "phase": "Released", "pv": "pvc-6", "reclaimPolicy": "Delete", "pendingDeletion": {"step": "Deleting"}}
]}`

// runDeleteNowWith runs claims delete-now with args, input typed on a
// terminal (or none: standard input is not a terminal).
func runDeleteNowWith(input *string, args ...string) cliOutput {
	var stdout, stderr bytes.Buffer
	env := cmdEnv{stdout: &stdout, stderr: &stderr, now: time.Now}
	if input != nil {
		env.stdin, env.isTTY = strings.NewReader(*input), func() bool { return true }
	}
	code, _ := runSubcommand(append([]string{"claims", "delete-now"}, args...), env)
	return cliOutput{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// TestDeleteNowRefusals: delete-now says, for each state that is not
// released and aside, what state it is and what to do, and changes
// nothing; a name released twice needs --pv; the confirmation says when
// the class archives; a wrong name typed, or no terminal without
// --confirm, does nothing.
func TestDeleteNowRefusals(t *testing.T) {
	addr := serve(t, "/v1/claims", http.StatusOK, []byte(deleteNowAnswer))
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, operatorTokenFile), []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"--addr", addr, "--root-dir", root}
	typed := func(s string) *string { return &s }
	for _, tc := range []struct {
		name  string
		input *string
		args  []string
		code  int
		want  string
	}{
		{"in place", nil, []string{"default/inplace", "--confirm", "default/inplace"}, exitRefused, "is still in place, most often because a pod on this node still has it set up: stop that pod"},
		{"retained", nil, []string{"default/kept", "--confirm", "default/kept"}, exitRefused, "whose reclaim policy is Retain: the agent never deletes its data"},
		{"being deleted", nil, []string{"default/going", "--confirm", "default/going"}, exitRefused, "is being deleted already"},
		{"released twice", nil, []string{"default/twice", "--confirm", "default/twice"}, exitUsage, "released storage more than once, on pvc-3 (claim UID u3) and pvc-4 (claim UID u4): give --pv"},
		{"no such claim", nil, []string{"default/none", "--confirm", "default/none"}, exitUnknownPod, "the agent has no claim default/none"},
		{"confirm another name", nil, []string{"default/twice", "--confirm", "default/other"}, exitUsage, "--confirm default/other is not the claim named, default/twice: nothing was done"},
		{"no terminal", nil, []string{"default/archived"}, exitUsage, "standard input is not a terminal"},
		{"wrong name typed", typed("default/twice\n"), []string{"default/archived"}, exitUsage, `"default/twice" is not default/archived: not confirmed, nothing was done`},
		{"archiving class", typed("nope\n"), []string{"default/archived"}, exitUsage, `It will be archived (its class has archiveOnDelete "true"`},
		// The answer server has no POST route, as an agent of cluster mode
		// or of an older version: the mux's 404 is not "no such storage".
		{"agent without the route", nil, []string{"default/archived", "--confirm", "default/archived"}, exitUnreachable, "the agent serves no delete-now: it runs without --manifests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := runDeleteNowWith(tc.input, append(tc.args, common...)...)
			if out.code != tc.code || !strings.Contains(out.stderr, tc.want) || out.stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d and %q", out.code, out.stdout, out.stderr, tc.code, tc.want)
			}
		})
	}
	// The answer server takes no POST: each refusal but the last was made
	// before one, or the test would have seen its 404 (exit 3).
}
