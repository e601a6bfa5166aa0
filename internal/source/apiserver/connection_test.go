package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// connServer answers /ok with 200, /unavailable with 503, and holds /hang
// until the request is cancelled.
func connServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
		case "/unavailable":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/hang":
			<-r.Context().Done()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// transport returns the round tripper a client built from a config that
// c wrapped would use.
func transport(t *testing.T, c *Connection, host string) http.RoundTripper {
	t.Helper()
	cfg := &rest.Config{Host: host}
	c.Wrap(cfg)
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// send sends a request through rt; cancel, when set, cancels it once sent.
func send(t *testing.T, rt http.RoundTripper, url string, cancel bool) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if cancel {
		time.AfterFunc(50*time.Millisecond, stop)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
	}
}

func TestConnection(t *testing.T) {
	srv := connServer(t)
	c := &Connection{}
	rt := transport(t, c, srv.URL)
	if err := c.Err(); err != nil {
		t.Fatalf("Err before any request = %v", err)
	}

	send(t, rt, srv.URL+"/unavailable", false)
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("Err after a 503 = %v, want the status", err)
	}
	send(t, rt, srv.URL+"/hang", true)
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("Err after a cancelled request = %v, want still the 503", err)
	}
	send(t, rt, srv.URL+"/ok", false)
	if err := c.Err(); err != nil {
		t.Errorf("Err after a 200 = %v, want nil", err)
	}
	send(t, rt, srv.URL+"/hang", true)
	if err := c.Err(); err != nil {
		t.Errorf("Err after a request cancelled by its caller = %v, want nil", err)
	}

	refused := httptest.NewServer(http.NotFoundHandler())
	refused.Close()
	rt = transport(t, c, refused.URL)
	send(t, rt, refused.URL+"/ok", false)
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("Err after a refused connection = %v, want it", err)
	}
}

// TestConnectionCallerGaveUp: a transport error caused by the request's own
// context says nothing about the server, however the transport wraps it.
func TestConnectionCallerGaveUp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, returned := range []error{context.Canceled, fmt.Errorf("dial tcp 10.0.0.1:6443: %w", context.Canceled)} {
		c := &Connection{}
		rt := trackingTransport{roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, returned }), c}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example/", nil)
		if _, err := rt.RoundTrip(req); err != returned {
			t.Errorf("RoundTrip = %v, want the transport's %v", err, returned)
		}
		if err := c.Err(); err != nil {
			t.Errorf("transport error %q of a cancelled request marked the API server unreachable: %v", returned, err)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestNilConnection: a nil *Connection tracks and reports nothing.
func TestNilConnection(t *testing.T) {
	var c *Connection
	if err := c.Err(); err != nil {
		t.Errorf("nil Connection Err = %v", err)
	}
	srv := connServer(t)
	rt := transport(t, c, srv.URL)
	send(t, rt, srv.URL+"/unavailable", false)
	if err := c.Err(); err != nil {
		t.Errorf("nil Connection Err after a 503 = %v", err)
	}
}
