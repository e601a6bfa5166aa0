package status

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Limits holds the bounds of every HTTP server the agent runs (status,
// health, metrics). A long-poll (GET /v1/pods/UID?wait=) outlives
// WriteTimeout: its handler moves its own write deadline (extendWrite).
type Limits struct {
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request. It does not bound a
	// long-poll: net/http lifts the read deadline once a request is read,
	// to notice a client that goes away.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing an answer, from the start of its
	// handler; it is set per request, so that the handlers that wait can
	// move it (http.Server's WriteTimeout could not be moved back by
	// pprof, which refuses profiles longer than it).
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection with no request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes int
	// MaxBodyBytes bounds a request's body; every route is a GET that
	// reads none.
	MaxBodyBytes int64
}

// DefaultLimits are the limits the agent runs with.
var DefaultLimits = Limits{
	ReadHeaderTimeout: 10 * time.Second,
	ReadTimeout:       30 * time.Second,
	WriteTimeout:      time.Minute,
	// A runtime asks for each pod it starts on a connection it keeps
	// alive: its next request comes within the burst, milliseconds
	// later. An idle connection holds a goroutine and 8 KiB of buffers
	// (110 of them after a burst, about 2 MiB with their stacks): after
	// half a second without a request they go, and a client's next
	// request opens a new connection (Go's and curl's clients retry a GET
	// on an idle connection the server closed). Half a second, so that
	// the closes come before the heap trim a burst arms (memtrim's quiet
	// second), which the last close puts off: one trim frees both,
	// within 2 s of the burst's end. With 5 s the closes and a second
	// trim woke the agent 4 to 6 s after every burst; with 1 s the trim
	// often fired first and a second one followed.
	IdleTimeout:    500 * time.Millisecond,
	MaxHeaderBytes: 16 << 10,
	MaxBodyBytes:   4 << 10,
}

// Serve serves h on ln, within DefaultLimits, until ctx ends; then it
// calls stopping (when not nil), so that requests still waiting can
// answer, and shuts the server down, giving them 2 s.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, stopping func()) error {
	return serveWithin(ctx, ln, h, stopping, DefaultLimits, nil)
}

// serveWithin is Serve within lim; connState, when not nil, is told of
// each connection's changes of state (http.Server.ConnState).
func serveWithin(ctx context.Context, ln net.Listener, h http.Handler, stopping func(), lim Limits, connState func(net.Conn, http.ConnState)) error {
	srv := &http.Server{
		Handler:           limitRequests(h, lim),
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ConnState:         connState,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if stopping != nil {
		stopping()
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// writeTimeoutKey carries a request's WriteTimeout to extendWrite.
type writeTimeoutKey struct{}

// limitRequests refuses a request body over lim.MaxBodyBytes and gives
// each request lim.WriteTimeout to be answered in.
func limitRequests(h http.Handler, lim Limits) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > lim.MaxBodyBytes {
			writeText(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body too large: at most %d bytes", lim.MaxBodyBytes))
			return
		}
		if r.Body != http.NoBody { // a request without a body (a GET) has nothing to bound
			r.Body = http.MaxBytesReader(w, r.Body, lim.MaxBodyBytes)
		}
		if lim.WriteTimeout > 0 {
			// Not supported by every ResponseWriter (httptest's); then
			// there is no deadline, as before.
			setWriteDeadline(w, time.Now().Add(lim.WriteTimeout))
			r = r.WithContext(context.WithValue(r.Context(), writeTimeoutKey{}, lim.WriteTimeout))
		}
		h.ServeHTTP(w, r)
	})
}

// extendWrite gives the answer to r d more than the server's write timeout,
// from now: for a handler that waits d before it answers.
func extendWrite(w http.ResponseWriter, r *http.Request, d time.Duration) {
	if base, ok := r.Context().Value(writeTimeoutKey{}).(time.Duration); ok {
		setWriteDeadline(w, time.Now().Add(d+base))
	}
}

// setWriteDeadline is http.NewResponseController(w).SetWriteDeadline(t),
// without the controller when w is net/http's own writer.
func setWriteDeadline(w http.ResponseWriter, t time.Time) {
	if d, ok := w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		_ = d.SetWriteDeadline(t)
		return
	}
	_ = http.NewResponseController(w).SetWriteDeadline(t)
}
