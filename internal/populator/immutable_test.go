package populator

import (
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"go.uber.org/zap/zaptest"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins"
	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// withActual is a harness whose populator sees an actual state.
func withActual(t *testing.T, src source.Source) (*harness, *asw.World) {
	actual := asw.New(nil)
	desired := dsw.New(nil)
	p := New(Config{Sources: []source.Source{src}, Desired: desired, Actual: actual,
		Plugins: plugins.Default(plugins.Config{Mounter: &mount.Fake{}, NodeName: "node-1"}), Logger: zaptest.NewLogger(t), Resync: time.Hour})
	return &harness{p: p, desired: desired}, actual
}

func TestSetUpVolumeRemovedFromSpecIsKept(t *testing.T) {
	src := newSource("manifests", true, testPod("u1", "web", emptyDirVolume("data"), emptyDirVolume("other")))
	h, actual := withActual(t, src)
	h.p.Populate()
	actual.Set(asw.Volume{PodUID: "u1", Name: "data", Plugin: "kubernetes.io/empty-dir", State: asw.Mounted})

	src.setPods(testPod("u1", "web", emptyDirVolume("other")))
	h.p.Populate()
	v := h.volume(t, "u1", "data")
	if !strings.Contains(v.Problem, "not in the pod's spec") || v.Plugin != "" || !v.Kept {
		t.Fatalf("volume = %+v; want it kept with a problem and no plugin (so it is neither set up nor torn down)", v)
	}
	// A volume that was never set up simply goes.
	src.setPods(testPod("u1", "web"))
	h.p.Populate()
	if _, ok := h.desired.Volume(dsw.Key{PodUID: "u1", Volume: "other"}); ok {
		t.Error("a volume that was never set up was kept after it left the spec")
	}
	h.volume(t, "u1", "data") // still kept
}

// After a restart the desired state starts empty: what is set up is known
// only from disk. A volume found there for a pod whose spec no longer lists
// it is kept all the same.
func TestVolumeFoundOnDiskAndMissingFromTheSpecIsKept(t *testing.T) {
	src := newSource("manifests", true, testPod("u1", "web", emptyDirVolume("other")))
	h, actual := withActual(t, src)
	actual.Set(asw.Volume{PodUID: "u1", Name: "data", Plugin: "kubernetes.io/empty-dir", State: asw.Uncertain, Reconstructed: true})
	h.p.Populate()
	v := h.volume(t, "u1", "data")
	if !v.Kept || v.Plugin != "" || !strings.Contains(v.Problem, "kept until the pod is deleted") {
		t.Fatalf("volume = %+v; want the volume found on disk kept", v)
	}
	if v := h.volume(t, "u1", "other"); v.Kept || v.Problem != "" {
		t.Fatalf("volume in the spec = %+v; want it plain", v)
	}
}

func TestSetUpVolumeChangingPluginIsKept(t *testing.T) {
	src := newSource("manifests", true, testPod("u1", "web", emptyDirVolume("data")))
	h, actual := withActual(t, src)
	h.p.Populate()
	actual.Set(asw.Volume{PodUID: "u1", Name: "data", Plugin: "kubernetes.io/empty-dir", State: asw.Mounted})

	src.setPods(testPod("u1", "web", configMapVolume("data", "app")))
	h.p.Populate()
	v := h.volume(t, "u1", "data")
	if !strings.Contains(v.Problem, "changed from kubernetes.io/empty-dir to kubernetes.io/configmap") || v.Plugin != "" {
		t.Fatalf("volume = %+v; want the emptyDir kept with a problem", v)
	}
	// Without a set-up volume, a change of type is just the new spec.
	src.setPods(testPod("u2", "api", configMapVolume("cfg", "app")))
	h.p.Populate()
	if v := h.volume(t, "u2", "cfg"); v.Problem != "" || v.Plugin != "kubernetes.io/configmap" {
		t.Fatalf("volume = %+v; want a plain configMap volume", v)
	}
}

// problems records the problems reported as events.
type problems struct {
	mu   sync.Mutex
	msgs []string // guarded by mu
}

func (p *problems) SetUpFailed(spec *volume.Spec, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, spec.Pod.Name+"/"+spec.Volume.Name+": "+err.Error())
}

func (p *problems) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.msgs)
}

// A volume with a spec problem is never attempted, so no operation reports
// it: the populator reports each new problem once.
func TestSpecProblemIsReportedOnce(t *testing.T) {
	bad := v1.Volume{Name: "vol", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "x"}}}
	src := newSource("api", true, testPod("u1", "web", bad, emptyDirVolume("data")))
	rec := &problems{}
	h := newHarness(t, src)
	h.p.cfg.Recorder = rec
	for range 3 {
		h.p.Populate()
	}
	if rec.count() != 1 || !strings.Contains(rec.msgs[0], "web/vol: csi volumes are not supported") {
		t.Fatalf("events = %q; want one for the csi volume", rec.msgs)
	}
	src.setPods(testPod("u1", "web", v1.Volume{Name: "vol"}, emptyDirVolume("data")))
	h.p.Populate()
	h.p.Populate()
	if rec.count() != 2 {
		t.Fatalf("events = %q; want one more for the new problem", rec.msgs)
	}
}
