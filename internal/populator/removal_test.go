package populator

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins"
	"github.com/volume-agent/volume-agent/internal/source"
)

// TestPodsFoundOnDisk: a pod directory found at start whose pod no source
// lists is removed only on the evidence of the source its record names
// (every source when it has no record): the API server once synced; the
// manifest directory once it has listed objects for the settle time, never
// while it lists nothing. Until then it is held, and the pass says when to
// look again.
func TestPodsFoundOnDisk(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	const settle = 750 * time.Millisecond
	empty := source.Status{Synced: true}
	listing := source.Status{Synced: true, ListingSince: t0}
	api := source.Status{Synced: true, Authoritative: true}
	for _, tc := range []struct {
		name               string
		origin             string
		manifests, cluster source.Status
		now                time.Time
		removed            bool
		why                string
		due                time.Time
	}{
		{"a manifest pod, the directory empty", "manifests", empty, api, t0.Add(time.Hour), false, "has listed nothing since", time.Time{}},
		{"a manifest pod, the directory listing for a moment", "manifests", listing, api, t0.Add(time.Millisecond), false, "has listed objects since", t0.Add(settle)},
		{"a manifest pod, the directory listing for the settle time", "manifests", listing, api, t0.Add(settle), true, "", time.Time{}},
		{"a manifest pod, the directory not synced", "manifests", source.Status{Reason: "bad.yaml"}, api, t0, false, "not synced", time.Time{}},
		{"an API pod, the manifest directory empty", "api", empty, api, t0, true, "", time.Time{}},
		{"an API pod, the API not synced", "api", listing, source.Status{Authoritative: true}, t0.Add(time.Hour), false, "not synced", time.Time{}},
		{"a pod without a record: every source must say so", "", empty, api, t0.Add(time.Hour), false, "every source must say it is gone", time.Time{}},
		{"a pod without a record, every source saying so", "", listing, api, t0.Add(settle), true, "", time.Time{}},
		{"a pod of a source this agent does not run", "other", listing, api, t0.Add(time.Hour), false, `source "other", which this agent does not run`, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			manifests, cluster := newSource("manifests", true), newSource("api", true)
			manifests.setStatus(tc.manifests)
			cluster.setStatus(tc.cluster)
			desired, actual := dsw.New(nil), asw.New(nil)
			actual.AddPodDir("found", true)
			if tc.origin != "" {
				actual.NameFoundPod("found", "ns", "web", tc.origin)
			}
			p := New(Config{Sources: []source.Source{manifests, cluster}, Desired: desired, PodDirs: actual, Settle: settle,
				Plugins: plugins.Default(plugins.Config{Mounter: &mount.Fake{}, NodeName: "node-1"}),
				Logger:  zaptest.NewLogger(t), Now: func() time.Time { return tc.now }})
			due := p.populate(false)
			why, held := desired.Held("found")
			if desired.Removed("found") != tc.removed || held == tc.removed || !strings.Contains(why, tc.why) || !due.Equal(tc.due) {
				t.Fatalf("removed %v, held %v (%q), due %v; want removed %v, a reason containing %q, due %v",
					desired.Removed("found"), held, why, due, tc.removed, tc.why, tc.due)
			}
		})
	}
}

// A pod listed since start and then dropped is removed by the pass that
// sees it gone, whatever its source lists otherwise; a desired pod is
// never held or removed, and coming back forgets its removal.
func TestPodSeenSinceStartIsRemovedWhenDropped(t *testing.T) {
	src := newSource("manifests", true, testPod("u1", "web", emptyDirVolume("data")))
	desired, actual := dsw.New(nil), asw.New(nil)
	actual.NotePod("u1", "ns", "web", "manifests")
	p := New(Config{Sources: []source.Source{src}, Desired: desired, PodDirs: actual,
		Plugins: plugins.Default(plugins.Config{Mounter: &mount.Fake{}, NodeName: "node-1"}), Logger: zaptest.NewLogger(t)})
	p.Populate()
	if _, held := desired.Held("u1"); held || desired.Removed("u1") {
		t.Fatal("a desired pod is held or removed")
	}
	src.setPods() // the directory now lists nothing: the removal was seen
	p.Populate()
	if !desired.Removed("u1") {
		t.Fatal("a pod its source dropped is not removed")
	}
	src.setPods(testPod("u1", "web", emptyDirVolume("data")))
	p.Populate()
	if desired.Removed(types.UID("u1")) {
		t.Fatal("a pod back in its source is still removed")
	}
}
