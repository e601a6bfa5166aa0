package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// socketGroup is the --status-socket-group of TestStatusSocket: a group no
// test user is in unless the test puts it there.
const socketGroup = 4242

// nobody is the user outside every group the test gives the socket.
const nobody = 65534

const socketPod = `
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: team, uid: web-1}
spec:
  containers: [{name: main, image: busybox}]
  volumes:
  - name: scratch
    emptyDir: {}
`

// TestStatusSocket runs the agent with its status endpoint on a unix socket
// (--status-addr unix://…, --status-socket-group) and the probes on a
// loopback port (--healthz-addr), as the DaemonSet does: the socket is
// mode 0660 in the group given; root's CLI and a member of the group read
// the node's pods through it; a user outside the group is refused
// (EACCES); the loopback port answers the probes and nothing about pods. A
// second agent on the same path is refused while the first serves, and the
// socket an agent killed with SIGKILL leaves is replaced at the next start.
func TestStatusSocket(t *testing.T) {
	a := newAgent(t)
	dir, err := os.MkdirTemp("", "va-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the other users reach the socket through it
		t.Fatal(err)
	}
	a.socket = filepath.Join(dir, "run", "status.sock") // run/ is the agent's to make
	a.writeManifest("pod.yaml", socketPod)
	a.start("--status-socket-group", "4242")
	addr := "unix://" + a.socket

	fi, err := os.Lstat(a.socket)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o660 || st.Uid != 0 || st.Gid != socketGroup {
		t.Errorf("socket %v owned by %d:%d; want a socket of mode 0660 owned by 0:%d", fi.Mode(), st.Uid, st.Gid, socketGroup)
	}
	if d, err := os.Stat(filepath.Dir(a.socket)); err != nil || d.Mode().Perm() != 0o755 {
		t.Errorf("the socket's directory: %v, %v; want it made with mode 0755", d.Mode(), err)
	}

	// Root's CLI: wait (a long-poll) and status through the socket.
	if r := runCLI(t, "wait", "team/web", "--addr", addr, "--timeout", "20s"); r.code != 0 {
		t.Fatalf("root's wait through the socket: exit %d: %s", r.code, r.stderr)
	}
	if r := runCLI(t, "status", "--addr", addr); r.code != 0 || !strings.Contains(r.stdout, "team/web") {
		t.Errorf("root's status through the socket: exit %d, stdout %q; want 0 and the pod", r.code, r.stdout)
	}

	// A user outside the group is refused by the kernel; one in it reads.
	if r := runCLIAs(t, &syscall.Credential{Uid: nobody, Gid: nobody}, "status", "--addr", addr); r.code != 3 ||
		!strings.Contains(r.stderr, "no permission to connect") || !strings.Contains(r.stderr, "permission denied") || strings.Contains(r.stdout, "web") {
		t.Errorf("status as uid %d outside group %d: exit %d, stdout %q; want exit 3, refused (EACCES)", nobody, socketGroup, r.code, r.stdout)
	}
	member := &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{socketGroup}}
	if r := runCLIAs(t, member, "status", "--addr", addr); r.code != 0 || !strings.Contains(r.stdout, "team/web") {
		t.Errorf("status as uid %d in group %d: exit %d, stdout %q; want 0 and the pod", nobody, socketGroup, r.code, r.stdout)
	}

	// The loopback port: the probes, and nothing on the node's pods.
	if code, body := a.get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz on --healthz-addr = %d %q", code, body)
	}
	for _, path := range []string{"/v1/pods", "/v1/claims", "/v1/pods/web-1"} {
		if code, body := a.get(path); code != http.StatusNotFound || strings.Contains(body, "web") {
			t.Errorf("%s on --healthz-addr = %d %q; want 404 and no pod", path, code, body)
		}
	}

	// A second agent on the same socket path is refused, and the first's
	// socket stays.
	code, out := runFailing(t, "--manifests", t.TempDir(), "--root-dir", t.TempDir(), "--node-name", "node-1",
		"--status-addr", addr, "--healthz-addr", freeAddr(t))
	if code != 1 || !strings.Contains(out, "another process is listening on it") {
		t.Errorf("a second agent on the socket: exit %d, %s; want 1, refused", code, tail(out, 5))
	}
	if r := runCLI(t, "status", "--addr", addr); r.code != 0 {
		t.Errorf("the first agent's socket after the second was refused: exit %d", r.code)
	}

	// SIGKILL leaves the socket; the next start replaces it.
	a.kill()
	if fi, err := os.Lstat(a.socket); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("after SIGKILL the socket is %v, %v; want it left behind", fi, err)
	}
	a.start("--status-socket-group", "4242")
	// Healthy is not yet synced: the pod shows once the first scan is done.
	waitFor(t, 10*time.Second, "status after a start over a stale socket", func() (bool, string) {
		r := runCLI(t, "status", "--addr", addr)
		return r.code == 0 && strings.Contains(r.stdout, "team/web"), fmt.Sprintf("exit %d: %s", r.code, r.stdout)
	})

	// SIGTERM removes it.
	if err := a.stop(); err != nil {
		t.Fatalf("agent exit after SIGTERM: %v", err)
	}
	if _, err := os.Lstat(a.socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after a clean stop: %v; want it removed", err)
	}
}

// TestStatusSocketNeverRemovesAFile: a regular file at --status-addr's
// path refuses the start and is left as it was.
func TestStatusSocketNeverRemovesAFile(t *testing.T) {
	needRoot(t)
	path := filepath.Join(t.TempDir(), "status.sock")
	if err := os.WriteFile(path, []byte("not a socket"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := runFailing(t, "--manifests", t.TempDir(), "--root-dir", t.TempDir(), "--node-name", "node-1",
		"--status-addr", "unix://"+path)
	if code != 1 || !strings.Contains(out, "the path exists and is not a socket") {
		t.Errorf("start over a regular file: exit %d, %s; want 1, refused", code, tail(out, 5))
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "not a socket" {
		t.Errorf("the file is now %q, %v; want it untouched", b, err)
	}
}

// runCLIAs is runCLI as another user.
func runCLIAs(t *testing.T, cred *syscall.Credential, args ...string) cliRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	run := cliRun{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		run.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("volume-agent %s as uid %d: %v", strings.Join(args, " "), cred.Uid, err)
	}
	t.Logf("$ (uid %d, groups %v) volume-agent %s  # exit %d\n%s%s", cred.Uid, cred.Groups, strings.Join(args, " "), run.code, run.stdout, run.stderr)
	return run
}
