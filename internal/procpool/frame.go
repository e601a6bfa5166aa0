package procpool

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MaxFrame is the largest request or answer body: well above a path
// (PATH_MAX is 4096) and its context.
const MaxFrame = 64 << 10

// headerSize is a frame's header: the body's length, then the request's
// number, both big-endian uint32. An answer carries its request's number.
const headerSize = 8

// ErrFrame is the error for bytes that are not a well-formed frame.
var ErrFrame = errors.New("malformed frame")

// appendFrame appends the frame of body, numbered id, to b.
func appendFrame(b []byte, id uint32, body []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(body))) //nolint:gosec // G115: callers bound body by MaxFrame
	b = binary.BigEndian.AppendUint32(b, id)
	return append(b, body...)
}

// readFrame reads one frame. It returns io.EOF at the end of r before a
// frame starts, and an error wrapping ErrFrame for a frame cut short or
// longer than MaxFrame (whose body it does not read).
func readFrame(r *bufio.Reader) (id uint32, body []byte, err error) {
	var h [headerSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, frameErr(err, "header")
	}
	n := binary.BigEndian.Uint32(h[:4])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("%w: body of %d bytes, more than %d", ErrFrame, n, MaxFrame)
	}
	body = make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, frameErr(err, "body")
	}
	return binary.BigEndian.Uint32(h[4:]), body, nil
}

// frameErr tells a frame cut short (ErrFrame) from the end of the input
// (io.EOF) and from a read error (a deadline, a closed pipe).
func frameErr(err error, part string) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || part == "body" && errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %s cut short", ErrFrame, part)
	}
	return err
}

// Serve is a child's main loop: it reads requests from r, answers each
// with handle and writes the answer to w, until r ends. It returns nil at
// the end of r between frames, and an error for malformed input (which
// leaves nothing to resynchronise on) or a failed write. handle's answer
// is cut to MaxFrame bytes.
func Serve(r io.Reader, w io.Writer, handle func(req []byte) []byte) error {
	return serve(r, w, func(_ uint32, req []byte) []byte { return handle(req) })
}

// serve is Serve with the request's number given to handle.
func serve(r io.Reader, w io.Writer, handle func(id uint32, req []byte) []byte) error {
	br := bufio.NewReader(r)
	var out []byte
	for {
		id, req, err := readFrame(br)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return fmt.Errorf("read request: %w", err)
		}
		answer := handle(id, req)
		if len(answer) > MaxFrame {
			answer = answer[:MaxFrame]
		}
		out = appendFrame(out[:0], id, answer)
		if _, err := w.Write(out); err != nil {
			return fmt.Errorf("write answer: %w", err)
		}
	}
}
