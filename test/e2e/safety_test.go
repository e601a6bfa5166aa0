package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const twoVolumePod = `
apiVersion: v1
kind: Pod
metadata: {name: keeper}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
%s`

// TestKeptVolumeSurvivesRestarts: a volume dropped from a running pod's
// spec is kept, and the promise holds across a SIGTERM and a SIGKILL
// restart — it rests on what is on disk, not on memory.
func TestKeptVolumeSurvivesRestarts(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("pod.yaml", fmt.Sprintf(twoVolumePod, "  - {name: data, emptyDir: {}}\n  - {name: other, emptyDir: {}}\n"))
	a.start()
	p := a.waitPod("default", "keeper", 10*time.Second, ready)
	file := filepath.Join(p.volume("data").Path, "db")
	if err := os.WriteFile(file, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.writeManifest("pod.yaml", fmt.Sprintf(twoVolumePod, "  - {name: other, emptyDir: {}}\n"))
	kept := func(p apiPod) bool {
		v := p.volume("data")
		return p.Ready && v.State == "Mounted" && strings.Contains(v.Error, "kept until the pod is deleted")
	}
	a.waitPod("default", "keeper", 5*time.Second, kept)
	for _, crash := range []bool{false, true} {
		a.restart(crash)
		waitFor(t, 10*time.Second, "/readyz after restart", func() (bool, string) {
			code, body := a.get("/readyz")
			return code == 200, body
		})
		a.waitPod("default", "keeper", 5*time.Second, kept)
		time.Sleep(time.Second) // past the settle delay: a wrong teardown would have run
		checkFile(t, file, "precious")
	}
	a.removeManifest("pod.yaml")
	a.waitPodDirGone(p.UID)
}
