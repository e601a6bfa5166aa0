package status

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/subpath"
)

// TestWakeThatCannotMakeReadyComputesNothing: a waiting request woken by a
// change that leaves its pod not ready computes no status (the cache holds
// no entry of it afterwards); once the pod is ready it answers 200 with the
// status it computed then.
func TestWakeThatCannotMakeReadyComputesNothing(t *testing.T) {
	f := newFixture(t)
	w := f.worlds
	w.Desired.SetPod(dsw.Pod{UID: "u1", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{wanted("a", cm, "1"), wanted("b", ed, "1")}})
	gone, cancel := context.WithCancel(context.Background())
	cancel() // each call below looks once, then finds its client gone
	look := func() *httptest.ResponseRecorder {
		t.Helper()
		rec := httptest.NewRecorder()
		r := httptest.NewRequestWithContext(gone, http.MethodGet, "/v1/pods/u1?wait=1m", nil)
		p := f.srv.watch("u1", time.Minute)
		defer f.srv.unwatch(p)
		if !f.srv.answerWhenReady(rec, r, p) {
			t.Fatal("answerWhenReady waits again with its client gone")
		}
		return rec
	}
	notReady := []func(){
		func() {},
		func() { w.Actual.Set(setUp("u1", "a", cm, "1", asw.Mounted)) },
		func() { w.Actual.Set(setUp("u1", "b", ed, "1", asw.Uncertain)) },
		func() { w.Desired.SetError(dsw.Key{PodUID: "u1", Volume: "b"}, "boom") },
		func() {
			failed := setUp("u1", "b", ed, "1", asw.Mounted)
			failed.SubPaths = &subpath.Outcome{Mounts: []subpath.Prepared{{Container: "c", SubPath: "x", Error: "refused"}}}
			w.Desired.SetPod(dsw.Pod{UID: "u1", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{wanted("a", cm, "1"),
				{Name: "b", Plugin: ed, Version: "1", SubPaths: []subpath.Want{{Container: "c", Path: "x"}}}}})
			w.Actual.Set(failed)
		},
	}
	for i, change := range notReady {
		change()
		if rec := look(); rec.Body.Len() != 0 {
			t.Fatalf("change %d: answered %d %s for a pod that is not ready", i, rec.Code, rec.Body)
		}
		f.srv.cache.mu.Lock()
		computed := len(f.srv.cache.entries)
		f.srv.cache.mu.Unlock()
		if computed != 0 {
			t.Fatalf("change %d: a wake that cannot make the pod ready computed its status", i)
		}
	}
	w.Actual.Set(setUp("u1", "b", ed, "1", asw.Mounted)) // a fresh outcome: no subPath prepared yet, none failed
	w.Desired.SetPod(dsw.Pod{UID: "u1", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{wanted("a", cm, "1"), wanted("b", ed, "1")}})
	rec := look()
	if rec.Code != http.StatusOK {
		t.Fatalf("ready pod answered %d %s", rec.Code, rec.Body)
	}
	want := httptest.NewRecorder()
	p, _ := f.srv.cfg.Worlds.Pod("u1") // with since, as served
	writeJSON(want, http.StatusOK, p)
	if !p.Ready || rec.Body.String() != want.Body.String() {
		t.Fatalf("ready answer:\n%s\nwant what writeJSON writes:\n%s", rec.Body, want.Body)
	}
}

// TestCachedAnswerIsWhatWriteJSONWrites: GET /v1/pods/UID answers the
// cached entry with the bytes writeJSON writes for the pod's status, for
// statuses with every kind of field (nested lists, usage, since, strings
// with newlines, quotes and HTML), ready or not, with and without wait=.
func TestCachedAnswerIsWhatWriteJSONWrites(t *testing.T) {
	f := newFixture(t)
	w := f.worlds
	tricky := "line one\nline two \"quoted\" <b>&amp;</b>\n    indented"
	w.Desired.SetPod(dsw.Pod{UID: "u1", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{
		wanted("a", cm, "1"),
		{Name: "b", Plugin: ed, Version: "1", Problem: tricky, SubPaths: []subpath.Want{{Container: "c", Path: "x"}, {Container: "c", Index: 1, Problem: tricky}}},
	}})
	w.Desired.SetPod(dsw.Pod{UID: "u2", Namespace: "ns", Name: "ready", Volumes: []dsw.Volume{wanted("a", cm, "1")}})
	w.Actual.Set(setUp("u1", "a", cm, "1", asw.Mounted))
	w.Actual.Set(setUp("u2", "a", cm, "1", asw.Mounted))
	w.Desired.SetPod(dsw.Pod{UID: "u3", Namespace: "ns", Name: "no-volumes"})
	tests := []struct {
		path, uid string
		code      int
	}{
		{"/v1/pods/u1", "u1", http.StatusOK},
		{"/v1/pods/u2", "u2", http.StatusOK},
		{"/v1/pods/u2?wait=1s", "u2", http.StatusOK},
		{"/v1/pods/u3?wait=1s", "u3", http.StatusOK},
		{"/v1/pods/u1?wait=10ms", "u1", http.StatusGatewayTimeout},
	}
	for _, tt := range tests {
		code, body := f.get(t, tt.path)
		p, _ := f.srv.cfg.Worlds.Pod(tt.uid) // with since, as served
		want := httptest.NewRecorder()
		writeJSON(want, code, p)
		if code != tt.code || body != want.Body.String() {
			t.Errorf("%s answered %d\n%s\nwant %d and what writeJSON writes:\n%s", tt.path, code, body, tt.code, want.Body)
		}
	}
}

// TestWaitParamIsTheQuerysWait: the wait= a request gives is read as
// url.Values would read it, whatever the query, and the query a runtime
// sends is read without allocating.
func TestWaitParamIsTheQuerysWait(t *testing.T) {
	for _, raw := range []string{"", "wait=5s", "wait=", "wait", "wait=5%73", "wait=5s&x=1", "x=1&wait=2s", "wait=1s&wait=2s",
		"wait=a+b", "wait=1s;x", "x;wait=1s", "wait==1s", "Wait=1s", "wait=1s%zz", "%77ait=3s", "wait=2m0s"} {
		u, err := url.Parse("/v1/pods/u1?" + raw)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := waitParam(u), u.Query().Get("wait"); got != want {
			t.Errorf("waitParam(%q) = %q, want %q as url.Values reads it", raw, got, want)
		}
	}
	u := &url.URL{Path: "/v1/pods/u1", RawQuery: "wait=2m0s"}
	if allocs := testing.AllocsPerRun(100, func() { waitParam(u) }); allocs != 0 {
		t.Errorf("waitParam of a runtime's query allocates %v times", allocs)
	}
}

// TestEachChangeWakesExactlyTheRequestsOfItsPod: a change of a pod wakes
// every request waiting for it, those registered first or last, and no
// request waiting for another pod; a request that answered is no longer
// woken, and leaves nothing behind.
func TestEachChangeWakesExactlyTheRequestsOfItsPod(t *testing.T) {
	f := newFixture(t)
	f.addPod("a", false)
	f.addPod("b", false)
	f.srv.Notify() // the first look names no pod: every waiter wakes
	a1, a2, b1 := f.srv.watch("a", time.Minute), f.srv.watch("a", time.Minute), f.srv.watch("b", time.Minute)
	f.mount("a")
	if !woken(a1) || !woken(a2) || woken(b1) {
		t.Fatal("a change of pod a did not wake exactly its two requests")
	}
	f.srv.unwatch(a2) // the last registered
	a3 := f.srv.watch("a", time.Minute)
	f.worlds.Desired.SetError(dsw.Key{PodUID: "a", Volume: "data"}, "boom")
	if !woken(a1) || !woken(a3) || woken(a2) || woken(b1) {
		t.Fatal("a change of pod a did not wake exactly the requests still waiting for it")
	}
	f.srv.unwatch(a1) // the first registered, behind a3
	f.mount("b")
	if woken(a3) || !woken(b1) {
		t.Fatal("a change of pod b did not wake exactly its request")
	}
	f.worlds.Desired.DeletePod("a")
	if !woken(a3) || woken(a1) {
		t.Fatal("the deletion of pod a did not wake exactly its request")
	}
	f.srv.unwatch(a3)
	f.srv.unwatch(b1)
	f.noWaitersLeft(t)
}

// TestChangeRacingTheRegistrationIsNotMissed: a change that makes a pod
// ready wakes its waiting request wherever it falls: between the
// request's registration and its first look (the look sees it), while it
// waits, and at random moments around a real request's start.
func TestChangeRacingTheRegistrationIsNotMissed(t *testing.T) {
	f := newFixture(t)
	get := func(uid string) *http.Request {
		return httptest.NewRequest(http.MethodGet, "/v1/pods/"+uid+"?wait=1m", nil)
	}
	// Registered, then the change, then the first look.
	f.addPod("u1", false)
	p := f.srv.watch("u1", time.Minute)
	f.mount("u1")
	rec := httptest.NewRecorder()
	if !f.srv.answerWhenReady(rec, get("u1"), p) || rec.Code != http.StatusOK {
		t.Fatalf("a change between the registration and the first look: answered %d, want 200 at once", rec.Code)
	}
	f.srv.unwatch(p)

	// Looked (not ready), then the change, while it waits (after 20 ms:
	// on a loaded machine the request may look later, and the look sees
	// the change instead).
	f.addPod("u2", false)
	p = f.srv.watch("u2", time.Minute)
	rec = httptest.NewRecorder()
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		for !f.srv.answerWhenReady(rec, get("u2"), p) {
		}
	}()
	time.Sleep(20 * time.Millisecond)
	f.mount("u2")
	<-answered
	if rec.Code != http.StatusOK {
		t.Fatalf("a change while waiting: answered %d, want 200", rec.Code)
	}
	f.srv.unwatch(p)

	// Real requests, each racing its pod's change.
	var wg sync.WaitGroup
	for i := range 50 {
		uid := fmt.Sprintf("race-%d", i)
		f.addPod(uid, false)
		wg.Add(2)
		go func() {
			defer wg.Done()
			if code, body := f.get(t, "/v1/pods/"+uid+"?wait=1m"); code != http.StatusOK {
				t.Errorf("%s: %d %s; want 200 once its change came", uid, code, body)
			}
		}()
		go func() {
			defer wg.Done()
			for range rand.IntN(200) {
				runtime.Gosched()
			}
			f.mount(uid)
		}()
	}
	wg.Wait()
}

// TestReleasedPollKeepsNoTokenNorTick: a poll given back after a change it
// did not take, and after its deadline passed unread, neither wakes nor
// times out the request it serves next (what pollPool reuses).
func TestReleasedPollKeepsNoTokenNorTick(t *testing.T) {
	f := newFixture(t)
	f.addPod("u1", false)
	p := f.srv.watch("u1", time.Millisecond)
	f.mount("u1") // a token, not taken
	time.Sleep(20 * time.Millisecond)
	f.srv.unwatch(p)
	p.deadline.Reset(time.Hour) // as watch does when it reuses p
	defer p.deadline.Stop()
	select {
	case <-p.changed:
		t.Fatal("a released poll kept a change's token")
	case <-p.deadline.C:
		t.Fatal("a released poll kept its deadline's tick")
	default:
	}
	// Through the pool: many short waits, then one that must last.
	for range 20 {
		if code, _ := f.get(t, "/v1/pods/unknown?wait=1ms"); code != http.StatusNotFound {
			t.Fatalf("a short wait for an unknown pod = %d, want 404", code)
		}
	}
	start := time.Now()
	if code, _ := f.get(t, "/v1/pods/unknown?wait=200ms"); code != http.StatusNotFound || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("a wait of 200ms = %d after %v; want 404 after its wait", code, time.Since(start))
	}
}
