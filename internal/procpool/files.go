package procpool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// A child of a pool with Config.PassFiles passes the descriptor an answer
// carries on its descriptor 3, a SOCK_SEQPACKET unix socket, as one
// message: the request's number (big-endian uint32) with the descriptor
// in SCM_RIGHTS, sent before the answer's frame. So once the agent has
// read an answer, the descriptor, if any, waits on the socket, and a
// non-blocking receive takes it or finds none.

// FilesFD is the descriptor number of the socket in the child.
const FilesFD = 3

// socketPair returns the agent's end (close-on-exec) and the child's end
// of a new socket pair.
func socketPair() (int, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("socket pair for a child process: %w", err)
	}
	return fds[0], os.NewFile(uintptr(fds[1]), "child-files"), nil
}

// receiveFile takes the descriptor passed with the answer to the request
// just sent, or returns nil if none was.
func (c *child) receiveFile() (*os.File, error) {
	var buf [4]byte
	oob := make([]byte, syscall.CmsgSpace(4*4)) // room for a few: more than one is refused
	n, oobn, flags, _, err := syscall.Recvmsg(c.sock, buf[:], oob, syscall.MSG_DONTWAIT|syscall.MSG_CMSG_CLOEXEC)
	switch {
	case errors.Is(err, syscall.EAGAIN):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("receive a descriptor from child process %d: %w", c.proc.Pid(), err)
	}
	fds, err := rights(oob[:oobn])
	if err == nil && (len(fds) != 1 || n != len(buf) || flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0 || binary.BigEndian.Uint32(buf[:]) != c.id) {
		err = fmt.Errorf("%w: %d descriptors in a message of %d bytes, flags %#x, for request %d", ErrFrame, len(fds), n, flags, c.id)
	}
	if err != nil {
		for _, fd := range fds {
			_ = syscall.Close(fd)
		}
		return nil, fmt.Errorf("descriptor from child process %d: %w", c.proc.Pid(), err)
	}
	return os.NewFile(uintptr(fds[0]), "from-child"), nil
}

// rights returns the descriptors of the SCM_RIGHTS messages of oob.
func rights(oob []byte) ([]int, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != syscall.SOL_SOCKET || m.Header.Type != syscall.SCM_RIGHTS {
			continue
		}
		got, err := syscall.ParseUnixRights(&m)
		if err != nil {
			return fds, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// ServeFiles is Serve for a child of a pool with Config.PassFiles: handle
// answers a request and may return a descriptor (else -1), which is passed
// on sock (the child's descriptor FilesFD) before the answer, then closed.
// A descriptor that cannot be passed makes the answer an error: handle's
// answer to a failure, fail(err).
func ServeFiles(r io.Reader, w io.Writer, sock *os.File, handle func(req []byte) ([]byte, int), fail func(error) []byte) error {
	return serve(r, w, func(id uint32, req []byte) []byte {
		answer, fd := handle(req)
		if fd < 0 {
			return answer
		}
		defer func() { _ = syscall.Close(fd) }()
		var buf [4]byte
		binary.BigEndian.PutUint32(buf[:], id)
		if err := syscall.Sendmsg(int(sock.Fd()), buf[:], syscall.UnixRights(fd), nil, 0); err != nil {
			return fail(fmt.Errorf("pass the descriptor to the agent: %w", err))
		}
		return answer
	})
}
