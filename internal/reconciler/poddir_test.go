package reconciler

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

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

// A pod's directory goes in the turn of its last volume's teardown, not
// behind every operation queued since: with one operation at a time and
// three pods removed at once, the first pod's directory is removed before
// the last pod's volumes are torn down, and each directory is removed once.
func TestPodDirectoryGoesWithItsLastVolume(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Executor.Parallelism = 1 })
	pods := []string{"p1", "p2", "p3"}
	for _, uid := range pods {
		h.desired.SetPod(desiredPod(uid, desiredVolume("a", "1"), desiredVolume("b", "1")))
	}
	h.desired.MarkPopulated()
	h.start(t)
	waitFor(t, "every volume set up", func() bool { return len(h.actual.Volumes()) == 6 })
	// And no set-up still queued (one planned again before the first
	// ended skips itself, but holds its volume's key meanwhile).
	waitFor(t, "no operation queued", func() bool {
		for _, uid := range pods {
			for _, v := range []string{"a", "b"} {
				if h.r.exec.Running(uid + "/" + v) {
					return false
				}
			}
		}
		return true
	})
	for _, uid := range pods {
		h.desired.DeletePod(types.UID(uid))
	}
	waitFor(t, "every pod directory removed", func() bool { return len(h.podDirs()) == 0 })
	var order []string
	for _, op := range h.observer.all() {
		if strings.Contains(op, "teardown") || strings.Contains(op, "cleanup") {
			order = append(order, strings.Split(op, " ")[1])
		}
	}
	want := []string{"teardown", "teardown", "cleanup", "teardown", "teardown", "cleanup", "teardown", "teardown", "cleanup"}
	if !slices.Equal(order, want) {
		t.Fatalf("operations in order: %v\nwant %v", order, want)
	}
	for _, uid := range pods {
		if exists(h.root.PodDir(types.UID(uid))) {
			t.Errorf("the directory of %s is still there", uid)
		}
	}
}
