package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/volume-agent/volume-agent/internal/status"
)

// answer is one scripted answer of the fake endpoint.
type answer struct {
	code int
	body string
}

// fakePods serves GET /v1/pods/{uid} from a script of answers (the last
// one repeats) and records the uid and wait of every request.
type fakePods struct {
	mu      sync.Mutex
	script  []answer
	asked   []string // guarded by mu; "uid wait=..."
	handler http.Handler
}

func newFakePods(t *testing.T, script ...answer) (*fakePods, string) {
	t.Helper()
	f := &fakePods{script: script}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/pods/{uid}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.asked = append(f.asked, r.PathValue("uid")+" wait="+r.URL.Query().Get("wait"))
		a := f.script[min(len(f.asked), len(f.script))-1]
		f.mu.Unlock()
		w.WriteHeader(a.code)
		_, _ = w.Write([]byte(a.body))
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return f, strings.TrimPrefix(ts.URL, "http://")
}

func (f *fakePods) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

// recordedPod returns pod uid of testdata/pods.json as the endpoint
// answers it.
func recordedPod(t *testing.T, uid string) string {
	t.Helper()
	var all struct {
		Pods []status.Pod `json:"pods"`
	}
	if err := json.Unmarshal(recordedPods(t), &all); err != nil {
		t.Fatal(err)
	}
	for _, p := range all.Pods {
		if p.UID == uid {
			body, err := json.MarshalIndent(p, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			return string(body)
		}
	}
	t.Fatalf("no pod %s in testdata/pods.json", uid)
	return ""
}

func TestWait(t *testing.T) {
	const app = "a4b6f27a-8127-577e-ada3-5882aee5edff"
	ready, broken := recordedPod(t, app), recordedPod(t, "broken-1")
	for _, tc := range []struct {
		name       string
		uid        string
		flags      []string
		script     []answer
		wantCode   int
		wantOut    string // in stdout, or stderr when the code is not 0
		wantAsked  string // the first request
		wantAskedN int
	}{
		{"ready", app, []string{"--timeout", "30s"}, []answer{{200, ready}}, exitOK,
			"pod default/app (" + app + "): volumes ready", app + " wait=30s", 1},
		{"not ready in time", "broken-1", []string{"--timeout", "1s"}, []answer{{504, broken}}, exitNotReady,
			"volume-agent wait: pod team/broken (broken-1): volumes not ready after 1s:\n" +
				"  data: Unsupported: csi volumes are not supported by volume-agent\n" +
				"  settings: Failed: configMap team/no-such-config not found\n", "broken-1 wait=1s", 1},
		{"look once", "broken-1", []string{"--timeout", "0"}, []answer{{200, broken}}, exitNotReady,
			"volumes not ready after 0s", "broken-1 wait=", 1},
		{"look once, ready", app, []string{"--timeout=0"}, []answer{{200, ready}}, exitOK, "volumes ready", app + " wait=", 1},
		{"unknown pod", "nope", []string{"--timeout", "1s"}, []answer{{404, "pod not found\n"}}, exitUnknownPod,
			"does not know pod nope", "nope wait=1s", 1},
		{"agent stopping", app, nil, []answer{{503, "volume-agent is stopping; ask again once it is back\n"}}, exitUnreachable,
			"is stopping: volume-agent is stopping; ask again once it is back", app + " wait=30s", 1},
		{"not a pod", app, nil, []answer{{200, `{"pods": []}`}}, exitUnreachable, "unexpected answer to GET /v1/pods/" + app, app + " wait=30s", 1},
		{"flags before the UID", app, nil, []answer{{200, ready}}, exitOK, "volumes ready", app + " wait=30s", 1},
		{"a UID that is not a path", "a/../b", []string{"--timeout", "1s"}, []answer{{404, "pod not found\n"}}, exitUnknownPod,
			"does not know pod a/../b", "a/../b wait=1s", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, addr := newFakePods(t, tc.script...)
			args := append([]string{"wait", tc.uid, "--addr", addr}, tc.flags...)
			if tc.name == "flags before the UID" {
				args = []string{"wait", "--addr", addr, tc.uid}
			}
			out := runCmd(recordedAt, args...)
			got := out.stdout
			if tc.wantCode != exitOK {
				got = out.stderr
			}
			if out.code != tc.wantCode || !strings.Contains(got, tc.wantOut) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and %q", out.code, out.stdout, out.stderr, tc.wantCode, tc.wantOut)
			}
			asked := f.requests()
			if len(asked) != tc.wantAskedN || asked[0] != tc.wantAsked {
				t.Errorf("requests %q, want %d starting with %q", asked, tc.wantAskedN, tc.wantAsked)
			}
		})
	}
}

// TestWaitAsksAgainPastTheLongestPoll: a wait longer than the endpoint's
// longest asks again, each time for at most that long, until ready, but
// not more often than the shortest interval.
func TestWaitAsksAgainPastTheLongestPoll(t *testing.T) {
	broken := recordedPod(t, "broken-1")
	f, addr := newFakePods(t, answer{504, broken}, answer{504, broken}, answer{200, strings.Replace(broken, `"ready": false`, `"ready": true`, 1)})
	c, err := newAPIClient(addr)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p, err := waitReady(context.Background(), c, "broken-1", time.Hour, pollLimits{longest: 2 * time.Second, shortest: 50 * time.Millisecond})
	if err != nil || !p.Ready {
		t.Fatalf("waitReady = %+v, %v; want the ready pod", p, err)
	}
	if asked := f.requests(); strings.Join(asked, ",") != "broken-1 wait=2s,broken-1 wait=2s,broken-1 wait=2s" {
		t.Errorf("requests %q, want three of at most 2s", asked)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("three requests in %v: an endpoint that answers at once is asked again at once", took)
	}
}

func TestWaitUsage(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		wantCode int
		wantErr  string
	}{
		{nil, exitUsage, "want one pod UID, got 0 arguments"},
		{[]string{"a", "b"}, exitUsage, "want one pod UID, got 2 arguments"},
		{[]string{"a", "--timeout", "-1s"}, exitUsage, "--timeout -1s: want 0 or more"},
		{[]string{"a", "--timeout", "soon"}, exitUsage, `invalid value "soon" for flag -timeout`},
		{[]string{"a", "--addr", "ftp://x:1"}, exitUsage, "want host:port"},
		{[]string{"--help"}, exitOK, "  4  the agent did not know the pod"},
	} {
		out := runCmd(recordedAt, append([]string{"wait"}, tc.args...)...)
		if out.code != tc.wantCode || !strings.Contains(out.stderr, tc.wantErr) {
			t.Errorf("wait %q: exit %d, stderr %q; want exit %d and %q", tc.args, out.code, out.stderr, tc.wantCode, tc.wantErr)
		}
	}
}
