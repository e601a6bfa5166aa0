package reconciler

import (
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/podrecord"
)

// A pod's record (its source) is on disk before its directory is made,
// and goes only once the directory is gone.
func TestPodRecordLivesWithItsDirectory(t *testing.T) {
	h := newHarness(t, nil)
	records := podrecord.Store{Dir: h.root.PodRecordsDir()}
	h.plugin.set(func(p *fakePlugin) {
		p.onSetUp = func() {
			recs, err := records.Load()
			if rec := recs["p1"]; err != nil || rec != (podrecord.Record{UID: "p1", Namespace: "ns", Name: "p1", Source: "test"}) {
				t.Errorf("at set-up the record of p1 is %+v (%v)", rec, err)
			}
		}
	})
	h.desired.SetPod(desiredPod("p1", desiredVolume("a", "1")))
	h.desired.MarkPopulated()
	h.start(t)
	h.waitMounted(t, "p1", "a", "1")
	h.desired.DeletePod("p1")
	waitFor(t, "the pod directory removed", func() bool { return !exists(h.root.PodDir("p1")) && len(h.podDirs()) == 0 })
	if recs, err := records.Load(); err != nil || len(recs) != 0 {
		t.Fatalf("records after the pod directory went: %v, %v", recs, err)
	}
	if h.desired.Removed("p1") {
		t.Error("the desired state still knows the removal of a pod whose directory is gone")
	}
}

// A pod directory left because it holds what the agent did not make keeps
// its record (a restart knows whose it is), though the pod is forgotten.
func TestPodRecordStaysWithADirectoryLeft(t *testing.T) {
	h := newHarness(t, nil)
	records := podrecord.Store{Dir: h.root.PodRecordsDir()}
	h.desired.SetPod(desiredPod("p1", desiredVolume("a", "1")))
	h.desired.MarkPopulated()
	h.start(t)
	h.waitMounted(t, "p1", "a", "1")
	foreign := filepath.Join(h.root.PodDir("p1"), "etc-hosts")
	writeFile(t, foreign, "keep me")
	h.desired.DeletePod("p1")
	waitFor(t, "the pod forgotten", func() bool { return len(h.podDirs()) == 0 && !exists(h.volumeDir("p1", "a")) })
	if !exists(foreign) {
		t.Fatal("a foreign file was removed")
	}
	if recs, err := records.Load(); err != nil || len(recs) != 1 {
		t.Fatalf("records with the pod directory left: %v, %v; want p1's", recs, err)
	}
}

// At start the pods found on disk are named, with their sources, by their
// records; a record whose directory is gone is forgotten.
func TestReconstructNamesPodsFromTheirRecords(t *testing.T) {
	h := newHarness(t, nil)
	records := podrecord.Store{Dir: h.root.PodRecordsDir()}
	mkdirAll(t, h.volumeDir("p1", "a"))
	mkdirAll(t, h.volumeDir("p2", "a"))
	for _, rec := range []podrecord.Record{
		{UID: "p1", Namespace: "team", Name: "web", Source: "manifests"},
		{UID: "gone", Namespace: "team", Name: "old", Source: "api"},
	} {
		if err := records.Write(rec); err != nil {
			t.Fatal(err)
		}
	}
	h.start(t)
	waitFor(t, "the actual state rebuilt", func() bool { return len(h.podDirs()) == 2 })
	want := []asw.PodDir{
		{UID: "p1", Namespace: "team", Name: "web", Source: "manifests", Reconstructed: true},
		{UID: "p2", Reconstructed: true},
	}
	if got := h.podDirs(); !slices.Equal(got, want) {
		t.Fatalf("pod dirs = %+v, want %+v", got, want)
	}
	recs, err := records.Load()
	if err != nil || !slices.Equal(sortedKeys(recs), []types.UID{"p1"}) {
		t.Fatalf("records = %v (%v), want p1's only", recs, err)
	}
}

func sortedKeys(m map[types.UID]podrecord.Record) []types.UID {
	var out []types.UID
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// The set-ups of a pod's volumes, started together, write its record once,
// before any of its directories, and the first makes the directories the
// others need: each finds its plugin's directory made.
func TestPodRecordWrittenOnceBeforeTheDirectories(t *testing.T) {
	h := newHarness(t, nil)
	var mu sync.Mutex
	writes := 0
	h.r.beforeRecord = func(uid types.UID) {
		mu.Lock()
		writes++
		first := writes == 1
		mu.Unlock()
		if exists(h.root.PodDir(uid)) {
			t.Errorf("the directory of pod %s exists before its record is written", uid)
		}
		if first {
			time.Sleep(20 * time.Millisecond) // holds the first write while the other set-ups start
		}
	}
	h.plugin.set(func(p *fakePlugin) {
		p.onSetUp = func() {
			if !exists(h.root.PluginDir("p1", testPlugin)) {
				t.Error("at set-up the plugin's directory is not made")
			}
		}
	})
	var vols []dsw.Volume
	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		vols = append(vols, desiredVolume(name, "1"))
	}
	h.desired.SetPod(desiredPod("p1", vols...))
	h.start(t)
	for _, v := range vols {
		h.waitMounted(t, "p1", v.Name, "1")
	}
	mu.Lock()
	defer mu.Unlock()
	if writes != 1 {
		t.Fatalf("the record of a pod with %d volumes was written %d times, want once", len(vols), writes)
	}
}
