package e2e

import (
	"path/filepath"
	"testing"
	"time"
)

// TestBundledExamplesBecomeReady runs the agent the way the README's quick start
// tells a newcomer to: on examples/manifests. Every example pod must become ready.
func TestBundledExamplesBecomeReady(t *testing.T) {
	a := newAgent(t)
	examples, err := filepath.Abs("../../examples/manifests")
	if err != nil {
		t.Fatal(err)
	}
	a.manifests = examples
	a.start()
	waitFor(t, 10*time.Second, "every example pod ready", func() (bool, string) {
		pods := a.pods()
		for _, p := range pods {
			if !p.Ready {
				return false, p.Namespace + "/" + p.Name + " not ready"
			}
		}
		return len(pods) >= 2, "fewer than 2 pods"
	})
	code, body := a.get("/readyz")
	if code != 200 {
		t.Fatalf("/readyz = %d %s", code, body)
	}
}
