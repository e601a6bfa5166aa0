package hostpath_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
)

// hungCheckers never answer: each request waits for its context, then
// holds its release, as a pool holds it for a child stuck in the kernel,
// until let go.
type hungCheckers struct {
	mu       sync.Mutex
	requests int      // guarded by mu
	held     []func() // guarded by mu: the releases not called yet
}

func (h *hungCheckers) Do(ctx context.Context, _ []byte, release func()) ([]byte, error) {
	<-ctx.Done()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests++
	h.held = append(h.held, release)
	return nil, errors.New("child process 1: no answer before the deadline")
}

// letGo calls the releases held.
func (h *hungCheckers) letGo() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, release := range h.held {
		release()
	}
	h.held = nil
}

// TestOneCheckPerPathInThePool: a check whose checker is abandoned stays
// in progress until the checker is really gone, and the retries of that
// path wait for it instead of hanging one more checker; other paths are
// checked meanwhile.
func TestOneCheckPerPathInThePool(t *testing.T) {
	h := &hungCheckers{}
	p := &hostpath.Plugin{Checkers: h}
	setUp := func(path, want string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := p.SetUp(ctx, spec(path, v1.HostPathDirectory), "")
		checkErr(t, err, want, path)
	}
	setUp("/x", "gave up waiting for storage")
	setUp("/x", "an earlier check of /x has not returned")
	setUp("/y", "gave up waiting for storage")
	if h.requests != 2 {
		t.Fatalf("%d requests to the checkers, want 2 (one per path)", h.requests)
	}
	h.letGo()
	setUp("/x", "gave up waiting for storage")
	if h.requests != 3 {
		t.Fatalf("%d requests to the checkers, want 3 once the first checker is gone", h.requests)
	}
	h.letGo()
}

// TestCheckerAnswers: what a checker answers becomes SetUp's error.
func TestCheckerAnswers(t *testing.T) {
	for _, tc := range []struct {
		answer  string
		wantErr string
	}{
		{"\x00", ""},
		{"\x01/x is not a directory", "hostPath /x (type Directory): /x is not a directory"},
		{"\x02a request has 3 fields", "the host path checker refused the request: a request has 3 fields"},
		{"", "the host path checker answered"},
		{"\x00extra", "the host path checker answered"},
		{"\x07", "the host path checker answered"},
	} {
		p := &hostpath.Plugin{Checkers: answering(tc.answer)}
		_, err := p.SetUp(context.Background(), spec("/x", v1.HostPathDirectory), "")
		checkErr(t, err, tc.wantErr)
	}
}

// answering checkers answer every request with the same bytes.
type answering string

func (a answering) Do(_ context.Context, _ []byte, release func()) ([]byte, error) {
	release()
	return []byte(a), nil
}

// TestCheckerRefusesGarbage: a checker answers a malformed request with a
// refusal and goes on answering; it exits 2 on input that is not frames,
// and 0 at the end of its input.
func TestCheckerRefusesGarbage(t *testing.T) {
	for _, req := range []string{"garbage", "/\x00Directory", "/\x00Dir\x00/x", "/\x00Directory\x00/x\x00/y"} {
		a, err := pool.Do(context.Background(), []byte(req), func() {})
		if err != nil || len(a) == 0 || a[0] != 2 {
			t.Errorf("request %q: answer %q (%v), want a refusal", req, a, err)
		}
	}
	a, err := pool.Do(context.Background(), []byte("/\x00Directory\x00/"), func() {})
	if err != nil || string(a) != "\x00" {
		t.Fatalf("request after garbage: answer %q (%v), want success", a, err)
	}
	if code := hostpath.RunServer(strings.NewReader("\xff\xff\xff\xffgarbage"), io.Discard); code != 2 {
		t.Errorf("RunServer on garbage = %d, want 2", code)
	}
	if code := hostpath.RunServer(strings.NewReader(""), io.Discard); code != 0 {
		t.Errorf("RunServer at the end of its input = %d, want 0", code)
	}
}
