package apiserver

import (
	"errors"
	"fmt"
	"net/http"
	"sync"

	"k8s.io/client-go/rest"
)

// Connection tracks whether the API server answers, from every request the
// client makes: a transport error or a 5xx marks it unreachable, any other
// answer reachable again. A nil *Connection reports nothing.
type Connection struct {
	mu  sync.Mutex
	err error // guarded by mu
}

// Wrap installs the tracker on a client config; a nil *Connection
// installs nothing.
func (c *Connection) Wrap(cfg *rest.Config) {
	if c == nil {
		return
	}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return trackingTransport{rt, c} })
}

// Err returns the last connection error, or nil when the last request got
// an answer.
func (c *Connection) Err() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Connection) set(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

type trackingTransport struct {
	next http.RoundTripper
	conn *Connection
}

func (t trackingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	switch {
	case err != nil && errors.Is(err, req.Context().Err()):
		// the caller gave up (a watch being closed): says nothing about the server
	case err != nil:
		t.conn.set(err)
	case resp.StatusCode >= 500:
		t.conn.set(fmt.Errorf("%s", resp.Status))
	default:
		t.conn.set(nil)
	}
	return resp, err
}
