package status

import (
	"context"
	"net/http"
	"net/http/httptest"
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
