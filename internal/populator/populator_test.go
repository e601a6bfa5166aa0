package populator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins"
	"github.com/volume-agent/volume-agent/internal/plugins/configmap"
	"github.com/volume-agent/volume-agent/internal/plugins/downwardapi"
	"github.com/volume-agent/volume-agent/internal/plugins/emptydir"
	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/volume"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSource is a source.Source whose state the test sets directly.
type fakeSource struct {
	name string

	mu         sync.Mutex
	pods       []*v1.Pod                // guarded by mu
	configMaps map[string]*v1.ConfigMap // guarded by mu; by namespace/name
	secrets    map[string]*v1.Secret    // guarded by mu; by namespace/name
	node       *v1.Node                 // guarded by mu
	synced     bool                     // guarded by mu
	// status, when set, is what Status returns (but for Name).
	status *source.Status // guarded by mu
	// objects, when set, answers lookups instead of configMaps.
	objects volume.Objects
}

var _ source.Source = (*fakeSource)(nil)

func newSource(name string, synced bool, pods ...*v1.Pod) *fakeSource {
	return &fakeSource{name: name, pods: pods, configMaps: map[string]*v1.ConfigMap{}, secrets: map[string]*v1.Secret{}, synced: synced}
}

func (s *fakeSource) Name() string { return s.name }

func (s *fakeSource) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (s *fakeSource) Pods() []*v1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.pods)
}

func (s *fakeSource) Objects() volume.Objects {
	if s.objects != nil {
		return s.objects
	}
	return s
}

func (s *fakeSource) Node() *v1.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node
}

func (s *fakeSource) Status() source.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status != nil {
		st := *s.status
		st.Name = s.name
		return st
	}
	if !s.synced {
		return source.Status{Name: s.name, Reason: "still reading"}
	}
	return source.Status{Name: s.name, Synced: true}
}

func (s *fakeSource) ConfigMap(namespace, name string) (*v1.ConfigMap, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cm, ok := s.configMaps[namespace+"/"+name]; ok {
		return cm, nil
	}
	return nil, volume.ErrNotFound
}

func (s *fakeSource) Secret(namespace, name string) (*v1.Secret, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if secret, ok := s.secrets[namespace+"/"+name]; ok {
		return secret, nil
	}
	return nil, volume.ErrNotFound
}

func (s *fakeSource) PersistentVolumeClaim(namespace, name string) (*v1.PersistentVolumeClaim, error) {
	return nil, volume.ErrNotFound
}

func (s *fakeSource) PersistentVolume(name string) (*v1.PersistentVolume, error) {
	return nil, volume.ErrNotFound
}

func (s *fakeSource) setPods(pods ...*v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = pods
}

func (s *fakeSource) setStatus(st source.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = &st
}

func (s *fakeSource) setSynced(synced bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.synced = synced
}

func (s *fakeSource) setConfigMap(name, resourceVersion string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.configMaps["ns/"+name] = &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: resourceVersion},
		Data:       map[string]string{"key": "value"},
	}
}

// Pod and volume builders.

func testPod(uid, name string, vols ...v1.Volume) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: "ns", Name: name, Labels: map[string]string{"app": "web"}},
		Spec:       v1.PodSpec{Volumes: vols},
		Status:     v1.PodStatus{Phase: v1.PodRunning},
	}
}

func emptyDirVolume(name string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}
}

func configMapVolume(name, configMap string, items ...v1.KeyToPath) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: configMap}, Items: items,
	}}}
}

func labelVolume(name, label string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{
		Items: []v1.DownwardAPIVolumeFile{{Path: "label", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels['" + label + "']"}}},
	}}}
}

// harness is a populator over fake sources with the real plugin registry.
type harness struct {
	p       *Populator
	desired *dsw.World
	changes *atomic.Int64
}

// testLocalRoot is the harness's local path root: only named, never
// opened (populating does no I/O).
const testLocalRoot = "/var/lib/volume-agent-local"

func newHarness(t *testing.T, sources ...source.Source) *harness {
	return newHarnessOf(t, plugins.Default(plugins.Config{Mounter: &mount.Fake{}, NodeName: "node-1", LocalRoot: testLocalRoot}), sources...)
}

// newHarnessOf is newHarness with the plugin registry reg.
func newHarnessOf(t *testing.T, reg *plugins.Registry, sources ...source.Source) *harness {
	var changes atomic.Int64
	desired := dsw.New(func() { changes.Add(1) })
	p := New(Config{
		Sources: sources,
		Desired: desired,
		Plugins: reg,
		Logger:  zaptest.NewLogger(t),
		Resync:  time.Hour,
	})
	return &harness{p: p, desired: desired, changes: &changes}
}

func (h *harness) volume(t *testing.T, uid, name string) dsw.Volume {
	t.Helper()
	v, ok := h.desired.Volume(dsw.Key{PodUID: types.UID(uid), Volume: name})
	if !ok {
		t.Fatalf("volume %s/%s is not desired", uid, name)
	}
	return v
}

func (h *harness) uids() []types.UID {
	var out []types.UID
	for _, p := range h.desired.Pods() {
		out = append(out, p.UID)
	}
	slices.Sort(out)
	return out
}

func TestDesiredPod(t *testing.T) {
	pod := testPod("u1", "web", labelVolume("info", "app"), emptyDirVolume("data"), configMapVolume("cfg", "app"))
	src := newSource("manifests", true, pod)
	src.node = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	src.setConfigMap("app", "1")
	h := newHarness(t, src)
	h.p.Populate()

	got, ok := h.desired.Pod("u1")
	if !ok {
		t.Fatal("pod not desired")
	}
	if got.Namespace != "ns" || got.Name != "web" || got.Source != "manifests" {
		t.Fatalf("pod = %s/%s from %q", got.Namespace, got.Name, got.Source)
	}
	wantPlugins := map[string]string{"cfg": configmap.Name, "data": emptydir.Name, "info": downwardapi.Name}
	wantSpec := map[string]*v1.Volume{"cfg": &pod.Spec.Volumes[2], "data": &pod.Spec.Volumes[1], "info": &pod.Spec.Volumes[0]}
	var names []string
	for _, v := range got.Volumes {
		names = append(names, v.Name)
		if v.Plugin != wantPlugins[v.Name] || v.Problem != "" || v.Unsupported {
			t.Errorf("volume %s: plugin %q, problem %q, unsupported %v", v.Name, v.Plugin, v.Problem, v.Unsupported)
		}
		if v.Spec == nil || v.Spec.Pod != pod || v.Spec.Volume != wantSpec[v.Name] || v.Spec.Node != src.node || v.Spec.Objects == nil {
			t.Errorf("volume %s: spec %+v does not point at the source's pod, volume and node", v.Name, v.Spec)
		}
		if v.Version == "" {
			t.Errorf("volume %s has no version", v.Name)
		}
	}
	if !slices.Equal(names, []string{"cfg", "data", "info"}) {
		t.Fatalf("volumes = %v", names)
	}
	if h.p.Passes() != 1 {
		t.Fatalf("Passes = %d, want 1", h.p.Passes())
	}
}

func TestTerminatedPodsAreNotDesired(t *testing.T) {
	tests := []struct {
		phase   v1.PodPhase
		desired bool
	}{
		{"", true},
		{v1.PodPending, true},
		{v1.PodRunning, true},
		{v1.PodUnknown, true},
		{v1.PodSucceeded, false},
		{v1.PodFailed, false},
	}
	for _, tt := range tests {
		t.Run(string(tt.phase), func(t *testing.T) {
			pod := testPod("u1", "web", emptyDirVolume("data"))
			pod.Status.Phase = tt.phase
			h := newHarness(t, newSource("manifests", true, pod))
			h.p.Populate()
			if _, ok := h.desired.Pod("u1"); ok != tt.desired {
				t.Fatalf("pod in phase %q desired: %v, want %v", tt.phase, ok, tt.desired)
			}
		})
	}
}

func TestPodThatTerminatesLeavesTheDesiredState(t *testing.T) {
	pod := testPod("u1", "web", emptyDirVolume("data"))
	src := newSource("manifests", true, pod)
	h := newHarness(t, src)
	h.p.Populate()
	if _, ok := h.desired.Pod("u1"); !ok {
		t.Fatal("running pod not desired")
	}
	done := pod.DeepCopy()
	done.Status.Phase = v1.PodSucceeded
	src.setPods(done)
	h.p.Populate()
	if _, ok := h.desired.Pod("u1"); ok {
		t.Fatal("pod that succeeded is still desired")
	}
}

func TestPodRemovedOnlyWhenItsSourceIsSynced(t *testing.T) {
	a := newSource("a", true, testPod("from-a", "x", emptyDirVolume("data")))
	b := newSource("b", true, testPod("from-b", "y", emptyDirVolume("data")))
	h := newHarness(t, a, b)
	h.p.Populate()
	if got := h.uids(); !slices.Equal(got, []types.UID{"from-a", "from-b"}) {
		t.Fatalf("desired = %v", got)
	}

	a.setPods()
	b.setPods()
	b.setSynced(false) // b lost its watch: what it lists now is not complete
	h.p.Populate()
	if got := h.uids(); !slices.Equal(got, []types.UID{"from-b"}) {
		t.Fatalf("desired = %v; want only the pod of the unsynced source kept", got)
	}

	b.setSynced(true)
	h.p.Populate()
	if got := h.uids(); len(got) != 0 {
		t.Fatalf("desired = %v; want empty once every source is synced", got)
	}
}

func TestMarkPopulatedOnlyWhenEverySourceIsSynced(t *testing.T) {
	a := newSource("a", true)
	b := newSource("b", false)
	h := newHarness(t, a, b)
	h.p.Populate()
	if h.desired.Populated() {
		t.Fatal("populated while source b is not synced")
	}
	b.setSynced(true)
	h.p.Populate()
	if !h.desired.Populated() {
		t.Fatal("not populated with every source synced")
	}
}

func TestVolumeProblems(t *testing.T) {
	tests := []struct {
		name        string
		uid         string
		volumes     []v1.Volume
		volume      string // the volume to check
		index       int    // its index among the desired volumes named volume
		problem     string // a substring of the problem; empty for none
		unsupported bool
	}{
		{name: "valid", uid: "u1", volumes: []v1.Volume{emptyDirVolume("data")}, volume: "data"},
		{name: "invalid volume name", uid: "u1", volumes: []v1.Volume{emptyDirVolume("Bad_Name")},
			volume: "Bad_Name", problem: `volume name "Bad_Name"`},
		{name: "volume name that climbs out", uid: "u1", volumes: []v1.Volume{emptyDirVolume("..")},
			volume: "..", problem: `volume name ".."`},
		{name: "invalid pod UID", uid: "../x", volumes: []v1.Volume{emptyDirVolume("data")},
			volume: "data", problem: "pod metadata.uid"},
		{name: "duplicate volume name: first has a problem", uid: "u1", volumes: []v1.Volume{emptyDirVolume("data"), configMapVolume("data", "app")},
			volume: "data", index: 0, problem: `spec.volumes[0].name "data" is used more than once`},
		{name: "duplicate volume name: second has a problem", uid: "u1", volumes: []v1.Volume{emptyDirVolume("data"), configMapVolume("data", "app")},
			volume: "data", index: 1, problem: `spec.volumes[1].name "data" is used more than once`},
		{name: "unsupported type", uid: "u1", volumes: []v1.Volume{{Name: "vol", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "x"}}}},
			volume: "vol", problem: "csi volumes are not supported", unsupported: true},
		{name: "no volume source", uid: "u1", volumes: []v1.Volume{{Name: "vol"}},
			volume: "vol", problem: "sets no volume source"},
		{name: "several volume sources", uid: "u1", volumes: []v1.Volume{{Name: "vol", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}, CSI: &v1.CSIVolumeSource{}}}},
			volume: "vol", problem: "several volume sources"},
		{name: "item path escapes the volume", uid: "u1", volumes: []v1.Volume{configMapVolume("cfg", "app", v1.KeyToPath{Key: "key", Path: "../../etc/x"})},
			volume: "cfg", problem: "configMap.items[0].path"},
		{name: "emptyDir medium unsupported", uid: "u1", volumes: []v1.Volume{{Name: "vol", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: "HugePages"}}}},
			volume: "vol", problem: "emptyDir medium"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, newSource("manifests", true, testPod(tt.uid, "web", tt.volumes...)))
			h.p.Populate()
			pod, ok := h.desired.Pod(types.UID(tt.uid))
			if !ok {
				t.Fatal("pod not desired: a problem must fail the volume, not drop the pod")
			}
			var matching []dsw.Volume
			for _, v := range pod.Volumes {
				if v.Name == tt.volume {
					matching = append(matching, v)
				}
			}
			if tt.index >= len(matching) {
				t.Fatalf("%d desired volumes named %q, want at least %d", len(matching), tt.volume, tt.index+1)
			}
			v := matching[tt.index]
			if tt.problem == "" {
				if v.Problem != "" || v.Plugin == "" || v.Spec == nil {
					t.Fatalf("volume = %+v; want a plugin and no problem", v)
				}
				return
			}
			if !strings.Contains(v.Problem, tt.problem) {
				t.Fatalf("problem = %q, want it to contain %q", v.Problem, tt.problem)
			}
			if v.Unsupported != tt.unsupported {
				t.Fatalf("Unsupported = %v, want %v", v.Unsupported, tt.unsupported)
			}
			if v.Plugin != "" || v.Spec != nil {
				t.Fatalf("volume with a problem has plugin %q and spec %v: it would be attempted", v.Plugin, v.Spec)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	base := func() (*v1.Pod, *fakeSource) {
		pod := testPod("u1", "web", configMapVolume("cfg", "app"), labelVolume("info", "app"), emptyDirVolume("data"))
		pod.Annotations = map[string]string{"note": "a"}
		src := newSource("manifests", true, pod)
		src.setConfigMap("app", "1")
		src.setConfigMap("other", "1")
		return pod, src
	}
	tests := []struct {
		name    string
		change  func(pod *v1.Pod, src *fakeSource)
		changed []string // volumes whose version must change; all others must not
	}{
		{"nothing (a fresh copy of the same pod)", func(*v1.Pod, *fakeSource) {}, nil},
		{"referenced configMap's resourceVersion", func(_ *v1.Pod, src *fakeSource) { src.setConfigMap("app", "2") }, []string{"cfg"}},
		{"referenced configMap deleted", func(_ *v1.Pod, src *fakeSource) {
			src.mu.Lock()
			delete(src.configMaps, "ns/app")
			src.mu.Unlock()
		}, []string{"cfg"}},
		{"unrelated configMap", func(_ *v1.Pod, src *fakeSource) { src.setConfigMap("other", "2") }, nil},
		{"configMap volume spec", func(pod *v1.Pod, _ *fakeSource) {
			mode := int32(0o600)
			pod.Spec.Volumes[0].ConfigMap.DefaultMode = &mode
		}, []string{"cfg"}},
		{"emptyDir volume spec", func(pod *v1.Pod, _ *fakeSource) {
			pod.Spec.Volumes[2].EmptyDir.Medium = v1.StorageMediumMemory
		}, []string{"data"}},
		{"label referenced by downwardAPI", func(pod *v1.Pod, _ *fakeSource) { pod.Labels["app"] = "api" }, []string{"info"}},
		{"label nobody references", func(pod *v1.Pod, _ *fakeSource) { pod.Labels["tier"] = "front" }, nil},
		{"annotation nobody references", func(pod *v1.Pod, _ *fakeSource) { pod.Annotations["note"] = "b" }, nil},
		{"pod resourceVersion", func(pod *v1.Pod, _ *fakeSource) { pod.ResourceVersion = "42" }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod, src := base()
			h := newHarness(t, src)
			h.p.Populate()
			before := map[string]string{}
			for _, name := range []string{"cfg", "info", "data"} {
				before[name] = h.volume(t, "u1", name).Version
			}
			changesBefore := h.changes.Load()

			next := pod.DeepCopy()
			tt.change(next, src)
			src.setPods(next)
			h.p.Populate()

			for _, name := range []string{"cfg", "info", "data"} {
				after := h.volume(t, "u1", name).Version
				if want := slices.Contains(tt.changed, name); (after != before[name]) != want {
					t.Errorf("volume %s: version %q → %q, want changed=%v", name, before[name], after, want)
				}
				if spec := h.volume(t, "u1", name).Spec; spec.Pod != next {
					t.Errorf("volume %s: the spec of the new pod was not stored", name)
				}
			}
			if signalled := h.changes.Load() != changesBefore; signalled != (len(tt.changed) > 0) {
				t.Errorf("desired state signalled a change: %v, want %v", signalled, len(tt.changed) > 0)
			}
		})
	}
}

func TestUIDUsedByTwoPods(t *testing.T) {
	first := testPod("u1", "first", emptyDirVolume("a"))
	second := testPod("u1", "second", emptyDirVolume("b"))
	t.Run("one source", func(t *testing.T) {
		h := newHarness(t, newSource("manifests", true, first, second))
		h.p.Populate()
		if p, _ := h.desired.Pod("u1"); p.Name != "first" || len(h.desired.Pods()) != 1 {
			t.Fatalf("desired = %+v; want only the first pod", h.desired.Pods())
		}
	})
	t.Run("two sources", func(t *testing.T) {
		h := newHarness(t, newSource("a", true, first), newSource("b", true, second))
		h.p.Populate()
		if p, _ := h.desired.Pod("u1"); p.Name != "first" || p.Source != "a" || len(h.desired.Pods()) != 1 {
			t.Fatalf("desired = %+v; want only the first pod", h.desired.Pods())
		}
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	src := newSource("manifests", true)
	h := newHarness(t, src)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.p.Run(ctx) }()

	waitFor(t, "the first pass", func() bool { return h.p.Passes() == 1 })
	if !h.desired.Populated() {
		t.Fatal("first pass did not mark the desired state populated")
	}
	time.Sleep(20 * time.Millisecond)
	if n := h.p.Passes(); n != 1 {
		t.Fatalf("%d passes without a notification; the resync is an hour", n)
	}

	src.setPods(testPod("u1", "web", emptyDirVolume("data")))
	h.p.Notify()
	waitFor(t, "the pod to become desired", func() bool { _, ok := h.desired.Pod("u1"); return ok })
	if err := h.p.Stuck(time.Second); err != nil {
		t.Fatalf("Stuck after a pass: %v", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after ctx was cancelled")
	}
}

// notReadyObjects answers every lookup with an input that is not known yet.
type notReadyObjects struct{}

func (notReadyObjects) ConfigMap(ns, name string) (*v1.ConfigMap, error) {
	return nil, fmt.Errorf("configmaps %s/%s: %w", ns, name, volume.ErrNotReady)
}

func (notReadyObjects) Secret(ns, name string) (*v1.Secret, error) {
	return nil, fmt.Errorf("secrets %s/%s: %w", ns, name, volume.ErrNotReady)
}

func (notReadyObjects) PersistentVolumeClaim(ns, name string) (*v1.PersistentVolumeClaim, error) {
	return nil, fmt.Errorf("persistentvolumeclaims %s/%s: %w", ns, name, volume.ErrNotReady)
}

func (notReadyObjects) PersistentVolume(name string) (*v1.PersistentVolume, error) {
	return nil, fmt.Errorf("persistentvolumes %s: %w", name, volume.ErrNotReady)
}

func TestVolumeWaitsForInputsNotKnownYet(t *testing.T) {
	src := newSource("api", true, testPod("u1", "web", configMapVolume("cfg", "app")))
	src.objects = notReadyObjects{}
	h := newHarness(t, src)
	h.p.Populate()
	v, ok := h.desired.Volume(dsw.Key{PodUID: "u1", Volume: "cfg"})
	if !ok || v.Problem != "" || v.Plugin == "" || !strings.Contains(v.Waiting, "configmaps ns/app") {
		t.Fatalf("volume = %+v; want it waiting for configmaps ns/app, without a problem", v)
	}
}
