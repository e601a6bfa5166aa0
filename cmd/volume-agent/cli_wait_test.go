package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// fakePods serves GET /v1/pods/{uid} from a script of answers, and GET
// /v1/pods from another (the last answer of each repeats), and records
// every request: "uid wait=..." or "list".
type fakePods struct {
	mu     sync.Mutex
	script []answer
	lists  []answer
	asked  []string // guarded by mu
	nPod   int      // guarded by mu; requests for one pod
	nList  int      // guarded by mu; requests for the list
}

func newFakePods(t *testing.T, script ...answer) (*fakePods, string) {
	t.Helper()
	return newFakeAgent(t, nil, script...)
}

// newFakeAgent is newFakePods that also lists pods, answering lists.
func newFakeAgent(t *testing.T, lists []answer, script ...answer) (*fakePods, string) {
	t.Helper()
	f := &fakePods{script: script, lists: lists}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/pods/{uid}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.asked = append(f.asked, r.PathValue("uid")+" wait="+r.URL.Query().Get("wait"))
		f.nPod++
		a := f.script[min(f.nPod, len(f.script))-1]
		f.mu.Unlock()
		w.WriteHeader(a.code)
		_, _ = w.Write([]byte(a.body))
	})
	mux.HandleFunc("GET /v1/pods", func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		f.asked = append(f.asked, "list")
		f.nList++
		a := f.lists[min(f.nList, len(f.lists))-1]
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
		{"a UID that is not a path", "a?b#c", []string{"--timeout", "1s"}, []answer{{404, "pod not found\n"}}, exitUnknownPod,
			"does not know pod a?b#c", "a?b#c wait=1s", 1},
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
		{nil, exitUsage, "volume-agent wait: want one pod, its UID or namespace/name; got 0 arguments (see volume-agent wait --help)\n"},
		{[]string{"a", "b"}, exitUsage, "want one pod, its UID or namespace/name; got 2 arguments"},
		{[]string{""}, exitUsage, `volume-agent wait: pod "": want its UID, or its namespace/name as Kubernetes spells them (lower-case letters, digits, '-' and '.') (see volume-agent wait --help)` + "\n"},
		{[]string{"a/../b"}, exitUsage, `pod "a/../b": want its UID, or its namespace/name`},
		{[]string{"Team/App"}, exitUsage, `pod "Team/App": want its UID, or its namespace/name`},
		{[]string{"team/"}, exitUsage, `pod "team/": want`},
		{[]string{"/app"}, exitUsage, `pod "/app": want`},
		{[]string{"team/app", "--bogus"}, exitUsage, "volume-agent wait: flag provided but not defined: -bogus (see volume-agent wait --help)\n"},
		{[]string{"a", "--timeout", "-1s"}, exitUsage, "--timeout -1s: want 0 or more"},
		{[]string{"a", "--timeout", "soon"}, exitUsage, `--timeout "soon": want a duration such as 10m or 30s`},
		{[]string{"a", "--addr", "ftp://x:1"}, exitUsage, "want host:port"},
		{[]string{"--help"}, exitOK, "  4  the agent did not know the pod"},
		{[]string{"--help"}, exitOK, "POD is the pod's UID, or its namespace/name"},
	} {
		out := runCmd(recordedAt, append([]string{"wait"}, tc.args...)...)
		if out.code != tc.wantCode || !strings.Contains(out.stderr, tc.wantErr) {
			t.Errorf("wait %q: exit %d, stderr %q; want exit %d and %q", tc.args, out.code, out.stderr, tc.wantCode, tc.wantErr)
		}
	}
}

// TestWaitByName: a namespace/name is looked up in GET /v1/pods, waited for
// at once when listed and looked up again until it is, and refused when
// the agent lists two pods by it.
func TestWaitByName(t *testing.T) {
	const app = "a4b6f27a-8127-577e-ada3-5882aee5edff"
	ready, broken := recordedPod(t, app), recordedPod(t, "broken-1")
	all := answer{200, string(recordedPods(t))}
	none := answer{200, `{"pods": []}`}
	twice := answer{200, `{"pods": [{"uid": "u2", "namespace": "default", "name": "app", "ready": true, "volumes": []},
		{"uid": "u1", "namespace": "default", "name": "app", "ready": true, "volumes": []}]}`}
	for _, tc := range []struct {
		name     string
		pod      string
		timeout  string
		lists    []answer
		script   []answer
		wantCode int
		// wantOut is all of stdout when the code is 0, else all of stderr;
		// ADDR stands for the agent's address.
		wantOut   string
		wantAsked string // the requests, the last one to its start
	}{
		{"listed and ready", "default/app", "30s", []answer{all}, []answer{{200, ready}}, exitOK,
			"pod default/app (" + app + "): volumes ready\n", "list," + app + " wait="}, // 30s less the lookup
		{"listed later", "default/app", "30s", []answer{none, none, all}, []answer{{200, ready}}, exitOK,
			"pod default/app (" + app + "): volumes ready\n", "list,list,list," + app + " wait="}, // 30s less the lookups
		{"not ready", "team/broken", "0", []answer{all}, []answer{{200, broken}}, exitNotReady,
			"volume-agent wait: pod team/broken (broken-1): volumes not ready after 0s:\n" +
				"  data: Unsupported: csi volumes are not supported by volume-agent\n" +
				"  settings: Failed: configMap team/no-such-config not found\n", "list,broken-1 wait="},
		{"never listed, look once", "team/nope", "0", []answer{all}, nil, exitUnknownPod,
			"volume-agent wait: unknown pod: the agent at http://ADDR does not know pod team/nope (is it on this node, in that namespace? volume-agent status lists the pods it knows)\n",
			"list"},
		{"two pods by that name", "default/app", "30s", []answer{twice}, nil, exitUsage,
			"volume-agent wait: more than one pod by that name: the agent at http://ADDR lists 2 pods default/app, with UIDs u1, u2; give the UID of the one to wait for\n",
			"list"},
		{"the list fails", "default/app", "30s", []answer{{500, "boom"}}, nil, exitUnreachable,
			"volume-agent wait: unexpected answer to GET /v1/pods: 500 Internal Server Error: boom\n", "list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, addr := newFakeAgent(t, tc.lists, tc.script...)
			out := runCmd(recordedAt, "wait", tc.pod, "--addr", addr, "--timeout", tc.timeout)
			got, want := out.stdout, strings.ReplaceAll(tc.wantOut, "ADDR", addr)
			if tc.wantCode != exitOK {
				got = out.stderr
			}
			if out.code != tc.wantCode || got != want {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and\n%q", out.code, out.stdout, out.stderr, tc.wantCode, want)
			}
			if asked := strings.Join(f.requests(), ","); !strings.HasPrefix(asked, tc.wantAsked) || strings.Count(asked, ",") != strings.Count(tc.wantAsked, ",") {
				t.Errorf("requests %q, want %q", asked, tc.wantAsked)
			}
		})
	}
}

// TestWaitByNameGivesUp: a namespace/name never listed is looked up until
// --timeout, ever less often, and then is an unknown pod.
func TestWaitByNameGivesUp(t *testing.T) {
	f, addr := newFakeAgent(t, []answer{{200, `{"pods": []}`}})
	c, err := newAPIClient(addr)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = waitPod(context.Background(), c, podRef{namespace: "team", name: "late"}, 700*time.Millisecond,
		pollLimits{longest: time.Minute, shortest: 400 * time.Millisecond, lookup: 100 * time.Millisecond})
	took := time.Since(start)
	if !errors.Is(err, errUnknownPod) || took < 700*time.Millisecond || took > 5*time.Second {
		t.Fatalf("waitPod = %v after %v; want an unknown pod after 700ms", err, took)
	}
	// Looked up at 0, 100, 300 and 700 ms (pauses of 100, 200, then 400 ms).
	if n := len(f.requests()); n < 3 || n > 5 {
		t.Errorf("%d lookups in 700ms, want about 4: %q", n, f.requests())
	}
}

func TestParsePodRef(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want podRef
		ok   bool
	}{
		{"a4b6f27a-8127-577e-ada3-5882aee5edff", podRef{uid: "a4b6f27a-8127-577e-ada3-5882aee5edff"}, true},
		{"broken-1", podRef{uid: "broken-1"}, true},
		{"team/broken", podRef{namespace: "team", name: "broken"}, true},
		{"kube-system/coredns-5d78c9869d-abcde", podRef{namespace: "kube-system", name: "coredns-5d78c9869d-abcde"}, true},
		{"default/web.v2", podRef{namespace: "default", name: "web.v2"}, true},
		{"", podRef{}, false},
		{"a/b/c", podRef{}, false},
		{"team.x/app", podRef{}, false}, // a namespace is a DNS label
		{"Team/app", podRef{}, false},
		{"team/", podRef{}, false},
		{"/app", podRef{}, false},
	} {
		got, err := parsePodRef(tc.arg)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parsePodRef(%q) = %+v, %v; want %+v, ok %v", tc.arg, got, err, tc.want, tc.ok)
		}
	}
}

// TestWaitWhenTheAgentRefusesToWait: an agent with too many requests
// waiting answers 429; wait then looks without waiting, and asks again a
// moment later.
func TestWaitWhenTheAgentRefusesToWait(t *testing.T) {
	broken := recordedPod(t, "broken-1")
	f, addr := newFakePods(t, answer{429, "too many requests waiting"}, answer{200, broken},
		answer{200, strings.Replace(broken, `"ready": false`, `"ready": true`, 1)})
	c, err := newAPIClient(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := waitReady(context.Background(), c, "broken-1", time.Hour, pollLimits{longest: 2 * time.Second, shortest: 50 * time.Millisecond})
	if err != nil || !p.Ready {
		t.Fatalf("waitReady = %+v, %v; want the ready pod", p, err)
	}
	if asked := f.requests(); strings.Join(asked, ",") != "broken-1 wait=2s,broken-1 wait=,broken-1 wait=2s" {
		t.Errorf("requests %q; want a wait refused, a look, and a wait again", asked)
	}
}

// TestWaitHelpSaysTheBoundOnWaitingRequests: the number of waiting
// requests wait --help names is the server's bound, not a number of its
// own that can fall behind it (it said 64 while the bound was 512).
func TestWaitHelpSaysTheBoundOnWaitingRequests(t *testing.T) {
	var out strings.Builder
	if code := runWait(cmdEnv{stdout: &out, stderr: &out}, []string{"--help"}); code != exitOK {
		t.Fatalf("wait --help: exit %d", code)
	}
	want := fmt.Sprintf("an agent with %d requests waiting already refuses", status.DefaultMaxWaiting)
	if got := strings.Join(strings.Fields(out.String()), " "); !strings.Contains(got, want) {
		t.Errorf("wait --help does not say %q:\n%s", want, out.String())
	}
}
