package nfs3

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// maxRecord bounds one RPC record (RFC 5531 record marking), so that a
// corrupt stream cannot make the client allocate without limit.
const maxRecord = 64 << 20

var (
	errBroken  = errors.New("connection to the NFS server broken")
	errNoReply = errors.New("NFS server did not answer in time")
)

// conn is one TCP connection to the server and the calls waiting for their
// replies on it. A conn that failed once is never used again.
type conn struct {
	nc      net.Conn
	writeMu sync.Mutex // one record at a time on the wire

	mu      sync.Mutex
	waiting map[uint32]chan []byte // guarded by mu: reply channels by XID
	err     error                  // guarded by mu: why the connection failed
	broken  chan struct{}          // closed when err is set
	done    chan struct{}          // closed when readLoop returns
}

func dial(ctx context.Context, addr string) (*conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &conn{nc: nc, waiting: map[uint32]chan []byte{}, broken: make(chan struct{}), done: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

// readLoop hands every reply to the call waiting for its XID, until the
// connection fails.
func (c *conn) readLoop() {
	defer close(c.done)
	r := bufio.NewReader(c.nc)
	for {
		rec, err := readRecord(r)
		if err == nil && len(rec) < 4 {
			err = fmt.Errorf("short RPC reply of %d bytes", len(rec))
		}
		if err != nil {
			c.fail(err)
			return
		}
		xid := binary.BigEndian.Uint32(rec)
		c.mu.Lock()
		ch := c.waiting[xid]
		delete(c.waiting, xid)
		c.mu.Unlock()
		if ch != nil {
			ch <- rec // buffered: never blocks
		}
	}
}

// fail marks the connection broken and closes it; later calls fail at once.
func (c *conn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	close(c.broken)
	c.nc.Close()
}

// close fails the connection and waits for its reader to end.
func (c *conn) close() {
	c.fail(net.ErrClosed)
	<-c.done
}

func (c *conn) failed() bool {
	select {
	case <-c.broken:
		return true
	default:
		return false
	}
}

// call sends the call record msg, whose first four bytes are its XID, and
// waits up to wait for the reply.
func (c *conn) call(ctx context.Context, msg []byte, wait time.Duration) ([]byte, error) {
	xid := binary.BigEndian.Uint32(msg)
	reply := make(chan []byte, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, errBroken
	}
	c.waiting[xid] = reply
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, xid)
		c.mu.Unlock()
	}()

	if err := c.write(msg, wait); err != nil {
		c.fail(err)
		return nil, errBroken
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case rec := <-reply:
		return rec, nil
	case <-c.broken:
		return nil, errBroken
	case <-timer.C:
		return nil, errNoReply
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// write sends msg as one record of a single fragment.
func (c *conn) write(msg []byte, wait time.Duration) error {
	rec := make([]byte, 4+len(msg))
	binary.BigEndian.PutUint32(rec, uint32(len(msg))|1<<31)
	copy(rec[4:], msg)
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if err := c.nc.SetWriteDeadline(time.Now().Add(wait)); err != nil {
		return err
	}
	_, err := c.nc.Write(rec)
	return err
}

// readRecord reads one record, joining its fragments.
func readRecord(r io.Reader) ([]byte, error) {
	var rec []byte
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, err
		}
		h := binary.BigEndian.Uint32(hdr[:])
		size := int(h &^ (1 << 31))
		if len(rec)+size > maxRecord {
			return nil, fmt.Errorf("RPC record larger than %d bytes", maxRecord)
		}
		frag := make([]byte, size)
		if _, err := io.ReadFull(r, frag); err != nil {
			return nil, err
		}
		rec = append(rec, frag...)
		if h&(1<<31) != 0 {
			return rec, nil
		}
	}
}
