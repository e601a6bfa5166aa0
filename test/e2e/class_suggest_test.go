package e2e

import (
	"strings"
	"testing"
	"time"
)

// fastSSD2 is a StorageClass "fast-ssd2"; misspeltClaim a claim "data"
// of class "fast-ssd", which does not exist.
const (
	fastSSD2 = `
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: fast-ssd2}
provisioner: volume-agent.io/local
volumeBindingMode: WaitForFirstConsumer
`
	misspeltClaim = `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  storageClassName: fast-ssd
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
`
)

// TestMisspeltClassSuggested: a claim of a StorageClass that does not
// exist waits with the cause first and the nearest class suggested, so
// that the table of volume-agent claims, which cuts a reason at 80
// characters, shows both, and that of volume-agent status the start of
// the cause after the claim's name; -o wide shows the whole reason.
func TestMisspeltClassSuggested(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("class.yaml", fastSSD2)
	a.writeManifest("claim.yaml", misspeltClaim)
	a.writeManifest("pod.yaml", strings.Replace(writerPod, "writer", "db", 1))
	a.start()
	cause := `StorageClass "fast-ssd" does not exist (did you mean "fast-ssd2"?)`
	var reason string
	waitFor(t, 10*time.Second, "the claim waiting with the cause first", func() (bool, string) {
		reason = claimOf(a.claims(), "data").Error
		return strings.HasPrefix(reason, cause+": no PersistentVolume fits claim default/data"), reason
	})
	if out := runCLI(t, "claims", "--addr", a.addr); !strings.Contains(out.stdout, cause) {
		t.Errorf("volume-agent claims:\n%s\nwant the cause %q within the cut reason", out.stdout, cause)
	}
	if out := runCLI(t, "claims", "--addr", a.addr, "-o", "wide"); !strings.Contains(out.stdout, reason) {
		t.Errorf("volume-agent claims -o wide:\n%s\nwant the whole reason %q", out.stdout, reason)
	}
	// The pod's row says which claim it waits for first, then the cause.
	if out := runCLI(t, "status", "--addr", a.addr); !strings.Contains(out.stdout, `StorageClass "fast-ssd"`) {
		t.Errorf("volume-agent status:\n%s\nwant the cause within the cut error", out.stdout)
	}
}
