package status

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"
)

// serveLimited serves f's server on a loopback port within lim until the
// test ends, and returns its base URL and a client.
func serveLimited(t *testing.T, f *fixture, lim Limits) (string, *http.Client) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveWithin(ctx, ln, f.srv.Handler(), f.srv.stop, lim, nil) }()
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String(), client
}

func getText(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read the answer: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// A long-poll answers after its wait even when the wait is longer than
// every read and write timeout of the server.
func TestLongPollOutlivesTimeouts(t *testing.T) {
	f := newFixture(t)
	f.addPod("u1", false)
	short := 100 * time.Millisecond
	base, c := serveLimited(t, f, Limits{ReadHeaderTimeout: short, ReadTimeout: short, WriteTimeout: short, IdleTimeout: short,
		MaxHeaderBytes: 4 << 10, MaxBodyBytes: 1 << 10})
	start := time.Now()
	code, body := getText(t, c, base+"/v1/pods/u1?wait=600ms")
	if code != http.StatusGatewayTimeout || !strings.Contains(body, `"uid": "u1"`) {
		t.Fatalf("long-poll = %d %s; want 504 with the pod", code, body)
	}
	if elapsed := time.Since(start); elapsed < 600*time.Millisecond {
		t.Fatalf("long-poll answered after %v, before its wait", elapsed)
	}
	if code, _ := getText(t, c, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("healthz after a long-poll = %d", code)
	}
	// The write deadline is the request's: a kept-alive connection idle
	// past it still answers the next request.
	short = 300 * time.Millisecond
	base, c = serveLimited(t, f, Limits{ReadHeaderTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: 100 * time.Millisecond,
		IdleTimeout: 5 * time.Second, MaxHeaderBytes: 4 << 10, MaxBodyBytes: 1 << 10})
	reused := 0
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if i.Reused {
			reused++
		}
	}}
	for range 2 {
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, base+"/healthz", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("healthz = %d", resp.StatusCode)
		}
		time.Sleep(short)
	}
	if reused != 1 {
		t.Errorf("%d of 2 requests on a kept-alive connection, want the second", reused)
	}
}

func TestRequestLimits(t *testing.T) {
	f := newFixture(t)
	base, c := serveLimited(t, f, Limits{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second,
		IdleTimeout: time.Second, MaxHeaderBytes: 4 << 10, MaxBodyBytes: 1 << 10})

	req, _ := http.NewRequest(http.MethodGet, base+"/v1/pods", strings.NewReader(strings.Repeat("x", 2<<10)))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "request body too large") {
		t.Errorf("GET with a 2 KiB body = %d %q; want 413", resp.StatusCode, b)
	}

	req, _ = http.NewRequest(http.MethodGet, base+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("x", 64<<10))
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("GET with 64 KiB of headers = %d; want 431", resp.StatusCode)
	}

	// A client that never finishes its headers is cut off.
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	_, err = bufio.NewReader(conn).ReadByte()
	if err == nil || time.Since(start) > 3*time.Second {
		t.Errorf("half a request: read %v after %v; want the connection closed after the header timeout", err, time.Since(start))
	}
}

func TestLongPollCap(t *testing.T) {
	f := newFixture(t)
	f.srv = New(Config{Worlds: f.worlds, Sources: f.srv.cfg.Sources, Logger: f.srv.log, MaxWaiting: 2})
	f.addPod("u1", false)
	base, c := serveLimited(t, f, DefaultLimits)

	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _ := getText(t, c, base+"/v1/pods/u1?wait=10s")
			codes <- code
		}()
	}
	waitUntil(t, "two requests waiting", func() bool { return len(f.srv.waiting) == 2 })

	resp, err := c.Get(base + "/v1/pods/u1?wait=10s")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "too many requests waiting (2 at most)") {
		t.Errorf("a third waiting request = %d %q (Retry-After %q); want 429 saying why", resp.StatusCode, b, resp.Header.Get("Retry-After"))
	}
	if code, _ := getText(t, c, base+"/v1/pods/u1"); code != http.StatusOK {
		t.Errorf("a request that does not wait = %d; want 200 whatever waits", code)
	}

	f.mount("u1")
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusOK {
			t.Errorf("a waiting request = %d once the pod is ready; want 200", code)
		}
	}
	waitUntil(t, "the waiting requests' places freed", func() bool { return len(f.srv.waiting) == 0 })
	if code, _ := getText(t, c, base+"/v1/pods/u1?wait=1s"); code != http.StatusOK {
		t.Errorf("a waiting request after the others ended = %d; want 200", code)
	}
}

func TestHealthHandlerServesNoPods(t *testing.T) {
	f := newFixture(t)
	f.addPod("u1", true)
	h := f.srv.HealthHandler()
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/v1/pods": 404, "/v1/claims": 404, "/metrics": 404} {
		rec := newRecorder(h, path)
		if rec.Code != want || (want == 404 && !strings.Contains(rec.Body.String(), "--status-addr")) || strings.Contains(rec.Body.String(), "u1") {
			t.Errorf("GET %s = %d %q; want %d and nothing on pods", path, rec.Code, rec.Body, want)
		}
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newRecorder(h http.Handler, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}
