package nfs3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/willscott/go-nfs-client/nfs/rpc"
	"github.com/willscott/go-nfs-client/nfs/xdr"
)

// maxWait caps how long one transmission waits for its reply (nfs(5):
// timeo grows linearly up to 600 seconds).
const maxWait = 600 * time.Second

// Client is a connection to one server that reconnects on demand. It is
// safe for concurrent use.
type Client struct {
	addr    string
	timeout time.Duration
	auth    rpc.Auth
	xid     atomic.Uint32

	mu     sync.Mutex
	cur    *conn // guarded by mu: the connection calls use, nil before the first
	closed bool  // guarded by mu
}

// NewClient returns a client of the server at addr (host:port, with an IPv6
// host in brackets). timeout is nfs(5)'s timeo: how long the first
// transmission of a call waits for its reply; each retransmission waits one
// timeout longer. It connects on the first call.
func NewClient(addr string, timeout time.Duration) *Client {
	c := &Client{addr: addr, timeout: timeout, auth: rpc.NewAuthUnix("nfstest", 0, 0).Auth()}
	c.xid.Store(uint32(time.Now().UnixNano()))
	return c
}

// Close closes the connection. Calls made afterwards fail.
func (c *Client) Close() {
	c.mu.Lock()
	cur := c.cur
	c.cur, c.closed = nil, true
	c.mu.Unlock()
	if cur != nil {
		cur.close()
	}
}

// Call makes one RPC and returns the reply's results. It retransmits (on a
// new connection if the old one broke or stopped answering) until a reply
// comes or ctx ends: ctx's deadline is what makes a call "soft".
func (c *Client) Call(ctx context.Context, prog, vers, proc uint32, args ...any) (*bytes.Reader, error) {
	msg, err := c.encode(prog, vers, proc, args)
	if err != nil {
		return nil, err
	}
	pause := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		wait := min(time.Duration(attempt)*c.timeout, maxWait)
		rec, err := c.try(ctx, msg, wait)
		if err == nil {
			return parseReply(rec)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, errClosed) {
			return nil, err
		}
		if !errors.Is(err, errNoReply) {
			// Refused or broken: wait a little before dialling again.
			if err := sleep(ctx, pause); err != nil {
				return nil, err
			}
			pause = min(2*pause, time.Second)
		}
	}
}

var errClosed = errors.New("NFS client closed")

// try sends msg once and waits up to wait for the reply.
func (c *Client) try(ctx context.Context, msg []byte, wait time.Duration) ([]byte, error) {
	cn, err := c.conn(ctx, wait)
	if err != nil {
		return nil, err
	}
	rec, err := cn.call(ctx, msg, wait)
	if errors.Is(err, errNoReply) {
		// A connection that stopped answering is replaced, as the
		// Linux client does after a major timeout.
		cn.fail(err)
	}
	return rec, err
}

// conn returns the current connection, dialling a new one if it broke.
// Concurrent callers may dial at once; the first to finish wins.
func (c *Client) conn(ctx context.Context, wait time.Duration) (*conn, error) {
	c.mu.Lock()
	cur, closed := c.cur, c.closed
	c.mu.Unlock()
	if closed {
		return nil, errClosed
	}
	if cur != nil && !cur.failed() {
		return cur, nil
	}
	dctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	cn, err := dial(dctx, c.addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		cn.close()
		return nil, errClosed
	case c.cur != nil && c.cur != cur && !c.cur.failed():
		cn.close()
		return c.cur, nil
	}
	if c.cur != nil {
		c.cur.close()
	}
	c.cur = cn
	return cn, nil
}

// callHeader is an RPC call message up to its arguments (RFC 5531).
type callHeader struct {
	Xid     uint32
	MsgType uint32 // 0: CALL
	rpc.Header
}

func (c *Client) encode(prog, vers, proc uint32, args []any) ([]byte, error) {
	var b bytes.Buffer
	hdr := callHeader{Xid: c.xid.Add(1), Header: rpc.Header{
		Rpcvers: 2, Prog: prog, Vers: vers, Proc: proc, Cred: c.auth, Verf: rpc.AuthNull,
	}}
	if err := xdr.Write(&b, hdr); err != nil {
		return nil, fmt.Errorf("encode RPC header: %w", err)
	}
	for _, a := range args {
		if err := xdr.Write(&b, a); err != nil {
			return nil, fmt.Errorf("encode arguments of procedure %d: %w", proc, err)
		}
	}
	return b.Bytes(), nil
}

// parseReply checks an RPC reply record (XID first) and returns its
// results.
func parseReply(rec []byte) (*bytes.Reader, error) {
	r := bytes.NewReader(rec[4:])
	var msgType, replyStat, verfFlavor, acceptStat uint32
	if err := read(r, &msgType, &replyStat); err != nil || msgType != 1 {
		return nil, fmt.Errorf("malformed RPC reply (message type %d): %w", msgType, err)
	}
	if replyStat != 0 {
		return nil, fmt.Errorf("RPC call denied by the server (reply_stat %d)", replyStat)
	}
	if err := read(r, &verfFlavor); err != nil {
		return nil, fmt.Errorf("decode RPC verifier: %w", err)
	}
	if _, err := xdr.ReadOpaque(r); err != nil {
		return nil, fmt.Errorf("decode RPC verifier: %w", err)
	}
	if err := read(r, &acceptStat); err != nil {
		return nil, fmt.Errorf("decode RPC accept status: %w", err)
	}
	if acceptStat != 0 {
		return nil, fmt.Errorf("RPC call not accepted by the server (accept_stat %d)", acceptStat)
	}
	return r, nil
}

// read decodes XDR values from r into vals, in order.
func read(r *bytes.Reader, vals ...any) error {
	for _, v := range vals {
		if err := xdr.Read(r, v); err != nil {
			return err
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
