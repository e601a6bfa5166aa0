package status

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/usage"
)

// fakeUsage is a UsageReader the test sets.
type fakeUsage struct {
	changes dsw.Watchers
	mu      sync.Mutex
	m       map[dsw.Key]usage.Measurement
}

func (f *fakeUsage) Usage(k dsw.Key) (usage.Measurement, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.m[k]
	return m, ok
}

func (f *fakeUsage) Watch() *dsw.Changes { return f.changes.Watch() }

func (f *fakeUsage) set(k dsw.Key, m usage.Measurement) {
	f.mu.Lock()
	f.m[k] = m
	f.mu.Unlock()
	f.changes.Add(k.PodUID)
}

func TestPodsShowUsage(t *testing.T) {
	u := &fakeUsage{m: map[dsw.Key]usage.Measurement{}}
	worlds := Worlds{Desired: dsw.New(nil), Actual: asw.New(nil), Usage: u}
	worlds.Desired.SetPod(dsw.Pod{UID: "p", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{wanted("a", cm, "1"), wanted("b", cm, "1")}})
	worlds.Actual.Set(setUp("p", "a", cm, "1", asw.Mounted))
	worlds.Actual.Set(setUp("p", "b", cm, "1", asw.Uncertain))
	srv := New(Config{Worlds: worlds, Logger: zap.NewNop()})
	get := func() []Volume {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/pods", nil))
		var body struct{ Pods []Pod }
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		return body.Pods[0].Volumes
	}
	if v := get(); v[0].Usage != nil {
		t.Fatalf("usage before any measurement: %+v", v[0].Usage)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	u.set(dsw.Key{PodUID: "p", Volume: "a"}, usage.Measurement{CapacityBytes: 8 << 20, UsedBytes: 1 << 20, Method: usage.MethodStatfs, Time: at})
	u.set(dsw.Key{PodUID: "p", Volume: "b"}, usage.Measurement{UsedBytes: 1})
	v := get()
	if v[0].Usage == nil || v[0].Usage.CapacityBytes != 8<<20 || v[0].Usage.UsedBytes != 1<<20 || v[0].Usage.Method != "statfs" || !v[0].Usage.Time.Equal(at) {
		t.Fatalf("volume a: usage %+v; want the measurement (the cache forgets a pod measured again)", v[0].Usage)
	}
	if v[1].Usage != nil {
		t.Fatalf("volume b is not Mounted and shows usage %+v", v[1].Usage)
	}
}

// TestPodsShowSizeLimitExceeded: a volume measured above its size limit is
// sizeLimitExceeded with a warning naming the volume, the limit and the
// bytes used; at its limit it is not.
func TestPodsShowSizeLimitExceeded(t *testing.T) {
	u := &fakeUsage{m: map[dsw.Key]usage.Measurement{}}
	worlds := Worlds{Desired: dsw.New(nil), Actual: asw.New(nil), Usage: u}
	worlds.Desired.SetPod(dsw.Pod{UID: "p", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{wanted("a", cm, "1"), wanted("b", cm, "1")}})
	worlds.Actual.Set(setUp("p", "a", cm, "1", asw.Mounted))
	worlds.Actual.Set(setUp("p", "b", cm, "1", asw.Mounted))
	u.set(dsw.Key{PodUID: "p", Volume: "a"}, usage.Measurement{UsedBytes: 2 << 20, SizeLimitBytes: 1 << 20, Method: usage.MethodWalk})
	u.set(dsw.Key{PodUID: "p", Volume: "b"}, usage.Measurement{UsedBytes: 1 << 20, SizeLimitBytes: 1 << 20, Method: usage.MethodWalk})
	p, ok := worlds.Pod("p")
	if !ok {
		t.Fatal("no pod")
	}
	a, b := p.Volumes[0], p.Volumes[1]
	want := `Usage of EmptyDir volume "a" exceeds the limit "1Mi": 2097152 bytes used`
	if !a.SizeLimitExceeded || a.Warning != want || a.Usage.SizeLimitBytes != 1<<20 {
		t.Errorf("volume a: exceeded %v, warning %q, usage %+v; want exceeded, %q", a.SizeLimitExceeded, a.Warning, a.Usage, want)
	}
	if b.SizeLimitExceeded || b.Warning != "" || b.Usage.SizeLimitBytes != 1<<20 {
		t.Errorf("volume b at its limit: exceeded %v, warning %q, usage %+v", b.SizeLimitExceeded, b.Warning, b.Usage)
	}
	raw, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	if fields["sizeLimitExceeded"] != true || fields["warning"] != want {
		t.Errorf("JSON %s; want sizeLimitExceeded and warning", raw)
	}
}

// The volume of a claim being deleted while its pod runs, kept as it is
// set up (after a restart: Uncertain, never set up again), shows as the
// pod's volume under its name in the spec: Mounted, its usage, the pod
// ready, the problem saying why.
func TestVolumeOfDeletedClaimShowsUsage(t *testing.T) {
	u := &fakeUsage{m: map[dsw.Key]usage.Measurement{}}
	worlds := Worlds{Desired: dsw.New(nil), Actual: asw.New(nil), Usage: u}
	why := "claim ns/data is being deleted; the volume stays set up as it is while this pod runs, and is released when the pod ends"
	worlds.Desired.SetPod(dsw.Pod{UID: "p", Namespace: "ns", Name: "db", Volumes: []dsw.Volume{{Name: "pv-1", SpecName: "store", Claim: "data", PV: "pv-1",
		Plugin: "kubernetes.io/local-volume", Problem: why, Deleting: true, Kept: true}}})
	worlds.Actual.Set(asw.Volume{PodUID: "p", Name: "pv-1", Plugin: "kubernetes.io/local-volume", Path: "/pv-1", State: asw.Uncertain, Reconstructed: true, Access: asw.ReadWrite})
	u.set(dsw.Key{PodUID: "p", Volume: "pv-1"}, usage.Measurement{CapacityBytes: 100, UsedBytes: 10, Method: usage.MethodWalk})
	pods := worlds.Pods()
	if len(pods) != 1 || len(pods[0].Volumes) != 1 || !pods[0].Ready {
		t.Fatalf("pods = %+v; want db ready with one volume", pods)
	}
	v := pods[0].Volumes[0]
	if v.Name != "store" || v.State != Mounted || v.Path != "/pv-1" || v.Error != why || v.Usage == nil || v.Usage.UsedBytes != 10 || v.Claim != "data" {
		t.Fatalf("volume = %+v; want store Mounted with its usage and why", v)
	}
}
