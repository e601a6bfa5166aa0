package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/binder"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/metrics"
	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/volume"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSource is a source whose status the test sets.
type fakeSource struct {
	mu     sync.Mutex
	status source.Status // guarded by mu
}

var _ source.Source = (*fakeSource)(nil)

func (s *fakeSource) Name() string { return s.Status().Name }
func (s *fakeSource) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
func (s *fakeSource) Pods() []*v1.Pod         { return nil }
func (s *fakeSource) Objects() volume.Objects { return nil }
func (s *fakeSource) Node() *v1.Node          { return nil }

func (s *fakeSource) Status() source.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

func (s *fakeSource) set(st source.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = st
}

// fixtureNow is the time of a fixture's clock.
var fixtureNow = time.Date(2026, 5, 6, 7, 8, 9, 500, time.UTC)

// fixture is a Server over real worlds that notify it, as in the agent.
type fixture struct {
	srv       *Server
	worlds    Worlds
	src       *fakeSource
	metrics   *metrics.Metrics
	recovered atomic.Bool
	healthErr atomic.Pointer[error]
	warnings  atomic.Pointer[[]string]
	ts        *httptest.Server
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{src: &fakeSource{status: source.Status{Name: "manifests", Synced: true}}}
	f.worlds = Worlds{Desired: dsw.New(func() { f.srv.Notify() }), Actual: asw.New(func() { f.srv.Notify() })}
	reg := prometheus.NewRegistry()
	f.metrics = metrics.New(reg, f.worlds.VolumesByState)
	f.recovered.Store(true)
	f.srv = New(Config{
		Addr:      "127.0.0.1:0",
		Worlds:    f.worlds,
		Sources:   []source.Source{f.src},
		Recovered: f.recovered.Load,
		Healthy: func() error {
			if err := f.healthErr.Load(); err != nil {
				return *err
			}
			return nil
		},
		Warnings: func() []string {
			if w := f.warnings.Load(); w != nil {
				return *w
			}
			return nil
		},
		Gatherer: reg,
		Logger:   zaptest.NewLogger(t),
		Now:      func() time.Time { return fixtureNow },
	})
	f.ts = httptest.NewServer(f.srv.Handler())
	t.Cleanup(f.ts.Close)
	return f
}

// get returns the status code and body of a GET.
func (f *fixture) get(t *testing.T, path string) (int, string) {
	t.Helper()
	code, _, body := getAnswer(t, f, path)
	return code, body
}

// woken reports whether a change has woken p, without waiting.
func woken(p *poll) bool {
	select {
	case <-p.changed:
		return true
	default:
		return false
	}
}

// addPod adds pod uid with one emptyDir volume "data", mounted or not.
func (f *fixture) addPod(uid string, mounted bool) {
	f.worlds.Desired.SetPod(dsw.Pod{UID: types.UID(uid), Namespace: "ns", Name: "web-" + uid, Volumes: []dsw.Volume{wanted("data", ed, "1")}})
	if mounted {
		f.mount(uid)
	}
}

func (f *fixture) mount(uid string) {
	f.worlds.Actual.Set(setUp(uid, "data", ed, "1", asw.Mounted))
}

func compact(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	return b.String()
}

func TestHealthz(t *testing.T) {
	f := newFixture(t)
	if code, body := f.get(t, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("healthz = %d %q", code, body)
	}
	err := errors.New("reconciler loop has not run for 31s after a change")
	f.healthErr.Store(&err)
	if code, body := f.get(t, "/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, err.Error()) {
		t.Fatalf("healthz = %d %q; want 503 with the message", code, body)
	}
}

// TestHealthzWarnings: a warning is shown by /healthz with 200 (the
// liveness probe must not restart the agent for what a restart does not
// fix), after "ok", one line each.
func TestHealthzWarnings(t *testing.T) {
	f := newFixture(t)
	w := []string{"CSIDriver x is not what the CSI driver needs: podInfoOnMount is false, the driver needs true", "second"}
	f.warnings.Store(&w)
	if code, body := f.get(t, "/healthz"); code != http.StatusOK || body != "ok\nwarning: "+w[0]+"\nwarning: second\n" {
		t.Fatalf("healthz = %d %q; want 200 with the warnings", code, body)
	}
	if code, body := f.get(t, "/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("readyz = %d %q; want 200 ok: a warning does not make the agent unready", code, body)
	}
}

func TestReadyz(t *testing.T) {
	f := newFixture(t)
	f.recovered.Store(false)
	f.src.set(source.Status{Name: "manifests", Reason: "reading /etc/manifests"})
	code, body := f.get(t, "/readyz")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("readyz = %d, want 503", code)
	}
	for _, reason := range []string{"recovery of mounted volumes is not done", "source manifests is not synced: reading /etc/manifests"} {
		if !strings.Contains(body, reason) {
			t.Errorf("readyz body %q does not say %q", body, reason)
		}
	}

	f.recovered.Store(true)
	if code, body := f.get(t, "/readyz"); code != http.StatusServiceUnavailable || strings.Contains(body, "recovery") {
		t.Fatalf("readyz = %d %q; want 503 for the source only", code, body)
	}
	f.src.set(source.Status{Name: "manifests", Synced: true})
	if code, body := f.get(t, "/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("readyz = %d %q, want 200 ok", code, body)
	}
}

func TestPodsJSON(t *testing.T) {
	f := newFixture(t)
	if code, body := f.get(t, "/v1/pods"); code != http.StatusOK || compact(t, body) != `{"pods":[]}` {
		t.Fatalf("empty /v1/pods = %d %s", code, body)
	}

	f.addPod("u1", true)
	f.addPod("u3", false)
	noSwap := setUp("u3", "data", ed, "1", asw.Mounted)
	noSwap.Swap = volume.SwapNever
	f.worlds.Actual.Set(noSwap)
	f.worlds.Desired.SetPod(dsw.Pod{UID: "u2", Namespace: "ns", Name: "web-u2", Volumes: []dsw.Volume{
		wanted("cfg", cm, "1"),
		{Name: "vol", Problem: "csi volumes are not supported by volume-agent", Unsupported: true},
	}})
	f.worlds.Desired.SetError(dsw.Key{PodUID: "u2", Volume: "cfg"}, `configMap ns/app not found`)
	code, body := f.get(t, "/v1/pods")
	if code != http.StatusOK {
		t.Fatalf("/v1/pods = %d", code)
	}
	want := `{"pods":[` +
		`{"uid":"u1","namespace":"ns","name":"web-u1","ready":true,"state":"Active","volumes":[` +
		`{"name":"data","plugin":"kubernetes.io/empty-dir","path":"/host/data","state":"Mounted","error":"","since":"2026-05-06T07:08:09Z"}]},` +
		`{"uid":"u2","namespace":"ns","name":"web-u2","ready":false,"state":"Active","volumes":[` +
		`{"name":"cfg","plugin":"kubernetes.io/configmap","path":"","state":"Failed","error":"configMap ns/app not found","since":"2026-05-06T07:08:09Z"},` +
		`{"name":"vol","plugin":"","path":"","state":"Unsupported","error":"csi volumes are not supported by volume-agent","since":"2026-05-06T07:08:09Z"}]},` +
		`{"uid":"u3","namespace":"ns","name":"web-u3","ready":true,"state":"Active","volumes":[` +
		`{"name":"data","plugin":"kubernetes.io/empty-dir","path":"/host/data","state":"Mounted","error":"","noSwap":true,"since":"2026-05-06T07:08:09Z"}]}]}`
	if got := compact(t, body); got != want {
		t.Fatalf("/v1/pods =\n%s\nwant\n%s", got, want)
	}
}

func TestPod(t *testing.T) {
	f := newFixture(t)
	f.addPod("u1", false)
	tests := []struct {
		path string
		code int
		body string // substring
	}{
		{"/v1/pods/unknown", http.StatusNotFound, "pod not found"},
		{"/v1/pods/u1", http.StatusOK, `"ready": false`},
		{"/v1/pods/u1?wait=0s", http.StatusOK, `"ready": false`},
		{"/v1/pods/u1?wait=soon", http.StatusBadRequest, `wait="soon"`},
		{"/v1/pods/u1?wait=-1s", http.StatusBadRequest, `wait="-1s"`},
		{"/v1/pods/unknown?wait=50ms", http.StatusNotFound, "pod not found"},
	}
	for _, tt := range tests {
		if code, body := f.get(t, tt.path); code != tt.code || !strings.Contains(body, tt.body) {
			t.Errorf("GET %s = %d %q; want %d with %q", tt.path, code, body, tt.code, tt.body)
		}
	}
	code, body := f.get(t, "/v1/pods/u1")
	var p Pod
	if err := json.Unmarshal([]byte(body), &p); err != nil || code != http.StatusOK || p.UID != "u1" || len(p.Volumes) != 1 {
		t.Fatalf("GET /v1/pods/u1 = %d %s (%v)", code, body, err)
	}
}

func TestPodWaitAnswersWhenReady(t *testing.T) {
	f := newFixture(t)
	f.addPod("u1", false)
	f.readyAfter(t, "u1", 50*time.Millisecond)
	start := time.Now()
	code, body := f.get(t, "/v1/pods/u1?wait=5s")
	elapsed := time.Since(start)
	if code != http.StatusOK || !strings.Contains(body, `"ready": true`) {
		t.Fatalf("wait = %d %s; want 200 and ready", code, body)
	}
	if elapsed < 40*time.Millisecond || elapsed > 2*time.Second {
		t.Fatalf("answered after %v; want as soon as the pod became ready (~50ms)", elapsed)
	}
}

func TestPodWaitTimesOut(t *testing.T) {
	f := newFixture(t)
	f.addPod("u1", false)
	start := time.Now()
	code, body := f.get(t, "/v1/pods/u1?wait=100ms")
	elapsed := time.Since(start)
	if code != http.StatusGatewayTimeout {
		t.Fatalf("wait = %d, want 504", code)
	}
	var p Pod
	if err := json.Unmarshal([]byte(body), &p); err != nil || p.UID != "u1" || p.Ready {
		t.Fatalf("504 body = %s (%v); want the pod, not ready", body, err)
	}
	if elapsed < 100*time.Millisecond || elapsed > 2*time.Second {
		t.Fatalf("answered after %v; want about 100ms", elapsed)
	}
	// Changes that do not make the pod ready do not end the wait early.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 5; i++ {
			time.Sleep(10 * time.Millisecond)
			f.srv.Notify()
		}
	}()
	if code, _ := f.get(t, "/v1/pods/u1?wait=100ms"); code != http.StatusGatewayTimeout {
		t.Fatalf("wait with unrelated changes = %d, want 504", code)
	}
	<-done
}

func TestSources(t *testing.T) {
	f := newFixture(t)
	f.src.set(source.Status{Name: "manifests", Reason: "reading", Errors: []string{"bad.yaml: line 3: mapping values are not allowed"}})
	code, body := f.get(t, "/v1/sources")
	want := `{"sources":[{"name":"manifests","synced":false,"reason":"reading","errors":["bad.yaml: line 3: mapping values are not allowed"]}]}`
	if code != http.StatusOK || compact(t, body) != want {
		t.Fatalf("/v1/sources = %d %s\nwant %s", code, body, want)
	}
	f.src.set(source.Status{Name: "manifests", Synced: true})
	if _, body := f.get(t, "/v1/sources"); compact(t, body) != `{"sources":[{"name":"manifests","synced":true}]}` {
		t.Fatalf("/v1/sources = %s", body)
	}
}

type fixedClaims []binder.ClaimStatus

func (c fixedClaims) Claims() []binder.ClaimStatus { return c }

func TestClaims(t *testing.T) {
	srv := New(Config{Worlds: Worlds{Desired: dsw.New(nil), Actual: asw.New(nil)}, Logger: zaptest.NewLogger(t)})
	get := func() string {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/claims", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("/v1/claims = %d", rec.Code)
		}
		return compact(t, rec.Body.String())
	}
	if got := get(); got != `{"claims":[]}` {
		t.Fatalf("/v1/claims without a binder = %s", got)
	}
	srv.cfg.Claims = fixedClaims{
		{Namespace: "ns", Name: "data", Phase: binder.PhaseBound, PV: "pv-1"},
		{Namespace: "ns", Name: "logs", Phase: binder.PhasePending, Error: "no PersistentVolume fits"},
	}
	want := `{"claims":[{"namespace":"ns","name":"data","phase":"Bound","pv":"pv-1"},{"namespace":"ns","name":"logs","phase":"Pending","error":"no PersistentVolume fits"}]}`
	if got := get(); got != want {
		t.Fatalf("/v1/claims = %s\nwant %s", got, want)
	}
}

type claimsWithSnapshots struct {
	fixedClaims
	snaps []binder.SnapshotStatus
}

func (c claimsWithSnapshots) Snapshots() []binder.SnapshotStatus { return c.snaps }

// GET /v1/claims answers the VolumeSnapshots of manifest mode under
// "snapshots", with the claim they are of and whether they are ready.
func TestClaimsWithSnapshots(t *testing.T) {
	srv := New(Config{Worlds: Worlds{Desired: dsw.New(nil), Actual: asw.New(nil)}, Logger: zaptest.NewLogger(t),
		Claims: claimsWithSnapshots{snaps: []binder.SnapshotStatus{{Namespace: "ns", Name: "snap", Claim: "data", ReadyToUse: true, RestoreSize: "1Gi"}}}})
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/claims", nil))
	want := `{"claims":[],"snapshots":[{"namespace":"ns","name":"snap","claim":"data","readyToUse":true,"restoreSize":"1Gi"}]}`
	if got := compact(t, rec.Body.String()); got != want {
		t.Fatalf("/v1/claims = %s\nwant %s", got, want)
	}
}

func TestMetrics(t *testing.T) {
	f := newFixture(t)
	f.addPod("u1", true)
	f.addPod("u2", false)
	f.metrics.ObserveOperation(ed, "setup", "success", 3*time.Millisecond)
	code, body := f.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	for _, line := range []string{
		`volume_agent_operations_total{operation="setup",outcome="success",plugin="kubernetes.io/empty-dir"} 1`,
		`volume_agent_operation_duration_seconds_count{operation="setup",plugin="kubernetes.io/empty-dir"} 1`,
		`volume_agent_volumes{state="Mounted"} 1`,
		`volume_agent_volumes{state="Pending"} 1`,
		`volume_agent_volumes{state="Failed"} 0`,
		`volume_agent_volumes{state="Unsupported"} 0`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}

func TestNoMetricsWithoutGatherer(t *testing.T) {
	srv := New(Config{Worlds: Worlds{Desired: dsw.New(nil), Actual: asw.New(nil)}, Logger: zaptest.NewLogger(t)})
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("/metrics without a gatherer = %d, want 404", rec.Code)
	}
}

func TestRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	f := newFixture(t)
	f.ts.Close()
	f.addPod("u1", false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.srv.Run(ctx) }()

	deadline := time.Now().Add(5 * time.Second)
	for f.srv.Addr() == nil {
		if time.Now().After(deadline) {
			t.Fatal("server did not start listening")
		}
		time.Sleep(2 * time.Millisecond)
	}
	base := "http://" + f.srv.Addr().String()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz = %d", resp.StatusCode)
	}

	// A long poll in flight does not hold up the shutdown, and is told
	// that the agent stops: never a 200 without the pod.
	type answer struct {
		code int
		body string
		err  error
	}
	polled := make(chan answer, 1)
	go func() {
		resp, err := client.Get(base + "/v1/pods/u1?wait=1m")
		if err != nil {
			polled <- answer{err: err}
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		polled <- answer{resp.StatusCode, string(body), err}
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx was cancelled")
	}
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Fatalf("shutdown took %v with a long poll in flight", elapsed)
	}
	if a := <-polled; a.err != nil || a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "stopping") {
		t.Fatalf("long poll during shutdown = %d %q (%v); want 503 saying the agent stops", a.code, a.body, a.err)
	}
}

func TestRunListenError(t *testing.T) {
	srv := New(Config{Addr: "127.0.0.1:-1", Worlds: Worlds{Desired: dsw.New(nil), Actual: asw.New(nil)}, Logger: zaptest.NewLogger(t)})
	if err := srv.Run(context.Background()); err == nil {
		t.Fatal("Run on a bad address succeeded")
	}
}

func TestProfilingOnlyWhenAsked(t *testing.T) {
	f := newFixture(t)
	if code, _ := f.get(t, "/debug/pprof/"); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/ without Profiling = %d; want 404", code)
	}
	f.srv.cfg.Profiling = true
	ts := httptest.NewServer(f.srv.Handler())
	defer ts.Close()
	resp, err := ts.Client().Get(ts.URL + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Fatalf("/debug/pprof/goroutine with Profiling = %d %.80q; want the goroutine profile", resp.StatusCode, body)
	}
}

// TestChangeWakesOnlyTheRequestsOfItsPod: requests waiting for one pod
// are woken by that pod's changes, in either world, and by no other pod's.
func TestChangeWakesOnlyTheRequestsOfItsPod(t *testing.T) {
	f := newFixture(t)
	f.addPod("a", false)
	f.addPod("b", false)
	f.srv.Notify() // the first look names no pod: every waiter wakes
	a := f.srv.watch("a", time.Minute)
	defer f.srv.unwatch(a)
	f.mount("b")
	f.worlds.Desired.SetError(dsw.Key{PodUID: "b", Volume: "data"}, "failed")
	f.addPod("c", true)
	if woken(a) {
		t.Fatal("changes of other pods woke a request waiting for pod a")
	}
	f.mount("a")
	if !woken(a) {
		t.Fatal("pod a's volume was set up, but its waiting request was not woken")
	}
	f.worlds.Desired.DeletePod("a")
	if !woken(a) {
		t.Fatal("pod a was deleted, but its waiting request was not woken")
	}
}

// TestWaitersOfPodsThatNeverAppearAreForgotten: a request for a pod that
// never appears leaves nothing behind once it has answered.
func TestWaitersOfPodsThatNeverAppearAreForgotten(t *testing.T) {
	f := newFixture(t)
	if code, _ := f.get(t, "/v1/pods/never?wait=50ms"); code != http.StatusNotFound {
		t.Fatalf("GET = %d, want 404", code)
	}
	f.noWaitersLeft(t)
}

// readyAfter mounts pod uid's volume after delay, on a goroutine the
// test's cleanup waits for, having first run each of before.
func (f *fixture) readyAfter(t *testing.T, uid string, delay time.Duration, before ...func()) {
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(delay)
		for _, fn := range before {
			fn()
		}
		f.mount(uid)
	}()
}

// noWaitersLeft fails the test if any pod still has a registered waiter.
func (f *fixture) noWaitersLeft(t *testing.T) {
	t.Helper()
	f.srv.mu.Lock()
	defer f.srv.mu.Unlock()
	if len(f.srv.waiters) != 0 {
		t.Fatalf("%d pods' waiters left behind", len(f.srv.waiters))
	}
}

// TestTerminatingPodServed: a pod deleted from the sources whose teardown
// cannot finish is served by /v1/pods and /v1/pods/{uid} as Terminating
// with its reason, never as ready, until its directory is gone; then 404.
func TestTerminatingPodServed(t *testing.T) {
	f := newFixture(t)
	f.worlds.Desired.MarkPopulated()
	f.worlds.Actual.NotePod("u1", "ns", "web-u1", "manifests")
	f.addPod("u1", true)
	if _, body := f.get(t, "/v1/pods"); !strings.Contains(body, `"state": "Active"`) {
		t.Fatalf("/v1/pods before the deletion = %s", body)
	}
	f.worlds.Desired.DeletePod("u1")
	f.worlds.Actual.SetTearDownError(dsw.Key{PodUID: "u1", Volume: "data"}, "remove /root/data: mount points remain: [/root/data/sub]")
	want := `{"uid":"u1","namespace":"ns","name":"web-u1","ready":false,"state":"Terminating",` +
		`"reason":"teardown of volume \"data\" failed: remove /root/data: mount points remain: [/root/data/sub]","volumes":[` +
		`{"name":"data","plugin":"kubernetes.io/empty-dir","path":"/host/data","state":"Terminating","error":"remove /root/data: mount points remain: [/root/data/sub]","since":"2026-05-06T07:08:09Z"}]}`
	if code, body := f.get(t, "/v1/pods"); code != http.StatusOK || compact(t, body) != `{"pods":[`+want+`]}` {
		t.Fatalf("/v1/pods = %d\n%s\nwant\n%s", code, compact(t, body), `{"pods":[`+want+`]}`)
	}
	if code, body := f.get(t, "/v1/pods/u1"); code != http.StatusOK || compact(t, body) != want {
		t.Fatalf("/v1/pods/u1 = %d %s", code, body)
	}
	if code, body := f.get(t, "/v1/pods/u1?wait=50ms"); code != http.StatusGatewayTimeout || !strings.Contains(body, "Terminating") {
		t.Fatalf("/v1/pods/u1?wait=50ms = %d %s; a terminating pod is never ready", code, body)
	}
	f.worlds.Actual.Delete(dsw.Key{PodUID: "u1", Volume: "data"})
	f.worlds.Actual.RemovePodDir("u1")
	if code, body := f.get(t, "/v1/pods"); code != http.StatusOK || compact(t, body) != `{"pods":[]}` {
		t.Fatalf("/v1/pods once torn down = %d %s", code, body)
	}
	if code, _ := f.get(t, "/v1/pods/u1"); code != http.StatusNotFound {
		t.Fatalf("/v1/pods/u1 once torn down = %d, want 404", code)
	}
}
