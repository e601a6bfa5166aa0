package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestHostUsersCannotReachVolumes: a user of the node who is not root
// reads no pod's volumes on the host, even when the operator made
// --root-dir world-readable: the agent's directories below it are 0750.
// Containers reach their volumes through their own mounts, not these
// paths.
func TestHostUsersCannotReachVolumes(t *testing.T) {
	a := newAgent(t)
	open := t.TempDir()
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	a.root = filepath.Join(open, "root")
	if err := os.Mkdir(a.root, 0o755); err != nil { // as an operator might
		t.Fatal(err)
	}
	a.writeManifest("config.yaml", fmt.Sprintf(appConfig, "color=blue"))
	a.writeManifest("secret.yaml", appSecret)
	a.writeManifest("pod.yaml", `
apiVersion: v1
kind: Pod
metadata: {name: app}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: scratch, emptyDir: {}}
  - {name: creds, secret: {secretName: app-creds}}
  - {name: config, configMap: {name: app-config}}
`)
	a.start()
	p := a.waitPod("default", "app", 10*time.Second, ready)
	for _, args := range [][]string{
		{"ls", filepath.Join(a.root, "pods")},
		{"ls", p.volume("scratch").Path},
		{"touch", filepath.Join(p.volume("scratch").Path, "planted")},
		{"cat", filepath.Join(p.volume("creds").Path, "password")},
		{"ls", p.volume("config").Path},
	} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("%v as nobody succeeded: %s", args, out)
		}
	}
}
