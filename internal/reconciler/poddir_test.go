package reconciler

import (
	"testing"
	"time"

	"github.com/volume-agent/volume-agent/internal/dsw"
)

// A set-up that fails after making the directories above its volume's (an
// NFS mount the server refuses leaves them) is followed, when the pod goes,
// by the removal of the pod's directory: at once, by the event of the
// pod's leaving, not by a resync (an hour here) or a restart.
func TestFailedSetUpsDirectoryGoesWithThePod(t *testing.T) {
	h := newHarness(t, nil)
	h.plugin.set(func(p *fakePlugin) { p.fail, p.failMade = errInjected, true })
	h.desired.SetPod(desiredPod("p1", desiredVolume("a", "1")))
	h.desired.MarkPopulated()
	h.start(t)
	key := dsw.Key{PodUID: "p1", Volume: "a"}
	waitFor(t, "the set-up to fail", func() bool { return h.desired.Error(key) != "" })
	if !exists(h.root.PluginDir("p1", testPlugin)) {
		t.Fatal("the failed set-up made no directory")
	}
	if _, ok := h.actualVolume("p1", "a"); ok {
		t.Fatal("a failed set-up is in the actual state")
	}
	start := time.Now()
	h.desired.DeletePod("p1")
	waitFor(t, "the pod directory removed", func() bool { return !exists(h.root.PodDir("p1")) && len(h.podDirs()) == 0 })
	t.Logf("pod gone to its directory removed: %v", time.Since(start))
}
