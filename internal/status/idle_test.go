package status

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/memtrim"
)

// runIdle runs a server whose connections idle for idle at most, and
// returns its base URL and the count of OnIdle calls, signalled on called.
func runIdle(t *testing.T, idle time.Duration) (string, *atomic.Int32, chan struct{}) {
	t.Helper()
	var n atomic.Int32
	called := make(chan struct{}, 10)
	srv := New(Config{Addr: "127.0.0.1:0", Worlds: Worlds{Desired: dsw.New(nil), Actual: asw.New(nil)}, Logger: zaptest.NewLogger(t),
		Limits: Limits{ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: idle,
			MaxHeaderBytes: 16 << 10, MaxBodyBytes: 4 << 10},
		OnIdle: func() { n.Add(1); called <- struct{}{} }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(5 * time.Second)
	for srv.Addr() == nil {
		if time.Now().After(deadline) {
			t.Fatal("server did not start listening")
		}
		time.Sleep(2 * time.Millisecond)
	}
	return "http://" + srv.Addr().String(), &n, called
}

// keepAlive makes a GET on a client of its own, whose connection stays
// open (kept alive) until the client closes it.
func keepAlive(t *testing.T, url string) *http.Client {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{}}
	resp, err := c.Get(url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return c
}

func waitCalled(t *testing.T, called chan struct{}, what string) {
	t.Helper()
	select {
	case <-called:
	case <-time.After(10 * time.Second):
		t.Fatalf("OnIdle not called %s", what)
	}
}

// TestOnIdleWhenLastConnectionCloses: OnIdle (the agent's memory trim) is
// called when the last open connection closes, not before, once.
func TestOnIdleWhenLastConnectionCloses(t *testing.T) {
	url, n, called := runIdle(t, time.Minute)
	clients := []*http.Client{keepAlive(t, url), keepAlive(t, url), keepAlive(t, url)}
	clients[0].CloseIdleConnections()
	clients[1].CloseIdleConnections()
	time.Sleep(100 * time.Millisecond) // a call would come in this time
	if got := n.Load(); got != 0 {
		t.Fatalf("OnIdle called %d times with a connection still open", got)
	}
	clients[2].CloseIdleConnections()
	waitCalled(t, called, "after the last connection closed")
	time.Sleep(100 * time.Millisecond)
	if got := n.Load(); got != 1 {
		t.Fatalf("OnIdle called %d times, want once", got)
	}
}

// TestIdleConnectionsClosedByTheServer: a kept-alive connection left idle
// past IdleTimeout is closed by the server, which then calls OnIdle: the
// memory it held is given back without the client doing anything.
func TestIdleConnectionsClosedByTheServer(t *testing.T) {
	url, _, called := runIdle(t, 100*time.Millisecond)
	c := keepAlive(t, url)
	defer c.CloseIdleConnections()
	waitCalled(t, called, "after the idle timeout")
	// The client's next GET finds its connection closed and opens another.
	resp, err := c.Get(url + "/healthz")
	if err != nil {
		t.Fatalf("GET after the server closed the idle connection: %v", err)
	}
	resp.Body.Close()
}

// TestDefaultIdleTimeout: the idle connections of a burst go after half a
// second, before the heap trim the burst armed.
func TestDefaultIdleTimeout(t *testing.T) {
	if DefaultLimits.IdleTimeout != 500*time.Millisecond || DefaultLimits.IdleTimeout >= memtrim.DefaultQuiet {
		t.Fatalf("DefaultLimits.IdleTimeout = %v, want 500ms, shorter than memtrim's quiet period", DefaultLimits.IdleTimeout)
	}
}
