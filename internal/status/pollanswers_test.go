package status

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/volume-agent/volume-agent/internal/dsw"
)

// TestPodAnswersByCase pins what GET /v1/pods/UID answers, with and
// without wait=, for a ready pod, a pod not ready, an unknown pod, a pod
// removed and torn down, a pod removed whose teardown is stuck
// (Terminating), a bad wait= and an escaped one: the status code, the
// Content-Type and every byte of the body. The expected body is
// encoding/json's indented encoding of the computed status (what the
// answers were before they were cached), so that a faster path can never
// change an answer.
func TestPodAnswersByCase(t *testing.T) {
	f := newFixture(t)
	f.addPod("ready", true)
	f.addPod("pending", false)
	f.addPod("removed", true)
	f.worlds.Desired.DeletePod("removed")
	f.worlds.Actual.Delete(dsw.Key{PodUID: "removed", Volume: "data"})
	f.worlds.Desired.Forget("removed")
	f.addPod("stuck", true)
	f.worlds.Actual.NotePod("stuck", "ns", "web-stuck", "manifests")
	f.worlds.Desired.DeletePod("stuck")
	f.worlds.Actual.SetTearDownError(dsw.Key{PodUID: "stuck", Volume: "data"}, "remove /root/data: device or resource busy")
	const notFound = "pod not found\n"
	tests := []struct {
		path, uid string // uid: the body is its status; "": text
		code      int
		text      string
	}{
		{"/v1/pods/ready", "ready", http.StatusOK, ""},
		{"/v1/pods/ready?wait=1s", "ready", http.StatusOK, ""},
		{"/v1/pods/ready?wait=1%73", "ready", http.StatusOK, ""},
		{"/v1/pods/ready?x=1&wait=1s", "ready", http.StatusOK, ""},
		{"/v1/pods/pending", "pending", http.StatusOK, ""},
		{"/v1/pods/pending?wait=30ms", "pending", http.StatusGatewayTimeout, ""},
		{"/v1/pods/unknown", "", http.StatusNotFound, notFound},
		{"/v1/pods/unknown?wait=30ms", "", http.StatusNotFound, notFound},
		{"/v1/pods/removed", "", http.StatusNotFound, notFound},
		{"/v1/pods/removed?wait=30ms", "", http.StatusNotFound, notFound},
		{"/v1/pods/stuck", "stuck", http.StatusOK, ""},
		{"/v1/pods/stuck?wait=30ms", "stuck", http.StatusGatewayTimeout, ""},
		{"/v1/pods/ready?wait=abc", "", http.StatusBadRequest, "wait=\"abc\": want a duration such as 5s\n"},
		{"/v1/pods/ready?wait=-1s", "", http.StatusBadRequest, "wait=\"-1s\": want a duration such as 5s\n"},
		{"/v1/pods/ready?wait=1s;x", "ready", http.StatusOK, ""}, // the pair with ';' is not a parameter: no wait
	}
	for _, tt := range tests {
		code, contentType, body := getAnswer(t, f, tt.path)
		wantType, wantBody := "text/plain; charset=utf-8", tt.text
		if tt.uid != "" {
			wantType, wantBody = "application/json", indented(t, f, tt.uid)
		}
		if code != tt.code || contentType != wantType || body != wantBody {
			t.Errorf("GET %s = %d %s\n%s\nwant %d %s\n%s", tt.path, code, contentType, body, tt.code, wantType, wantBody)
		}
	}
}

// TestPodAnswerOfAWaitThatEndsReady: a request waiting for a pod that
// becomes ready answers 200 with the ready status, byte for byte.
func TestPodAnswerOfAWaitThatEndsReady(t *testing.T) {
	f := newFixture(t)
	f.addPod("u1", false)
	f.readyAfter(t, "u1", 20*time.Millisecond, func() {
		f.worlds.Actual.NotePod("u1", "ns", "web-u1", "manifests") // wakes, not ready
	})
	code, contentType, body := getAnswer(t, f, "/v1/pods/u1?wait=1m")
	if want := indented(t, f, "u1"); code != http.StatusOK || contentType != "application/json" || body != want {
		t.Fatalf("wait = %d %s\n%s\nwant 200 application/json\n%s", code, contentType, body, want)
	}
}

// getAnswer returns the status code, Content-Type and body of a GET.
func getAnswer(t *testing.T, f *fixture, path string) (int, string, string) {
	t.Helper()
	resp, err := f.ts.Client().Get(f.ts.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
}

// indented is encoding/json's indented encoding of the status of pod uid
// as computed now, as a JSON answer ends (with a newline).
func indented(t *testing.T, f *fixture, uid string) string {
	t.Helper()
	p, ok := f.srv.cfg.Worlds.Pod(uid)
	if !ok {
		t.Fatalf("pod %s is not shown", uid)
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}
