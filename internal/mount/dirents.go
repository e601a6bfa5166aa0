package mount

import (
	"encoding/binary"
	"errors"
	"sync"

	"golang.org/x/sys/unix"
)

// direntBufSize is the buffer of one getdents64 call: 8 KiB, as the
// standard library's, holds the entries of every directory the agent
// makes in one call.
const direntBufSize = 8192

// direntBufs holds getdents64 buffers between directory reads: a teardown
// burst reads hundreds of directories, and 8 KiB each would be garbage
// the collector must chase in the middle of it.
var direntBufs = sync.Pool{New: func() any { b := make([]byte, direntBufSize); return &b }}

// getDirentBuf takes a buffer of direntBufSize bytes; putDirentBuf gives
// it back once nothing uses it.
func getDirentBuf() *[]byte  { return direntBufs.Get().(*[]byte) }
func putDirentBuf(b *[]byte) { direntBufs.Put(b) }

// Dirent is one entry of a directory: its name, and its type as
// getdents64 gives it (unix.DT_DIR, unix.DT_LNK, ...; unix.DT_UNKNOWN
// where the file system does not say: stat it).
type Dirent struct {
	Name string
	Type uint8
}

// ReadDirents reads the directory open at fd from its current offset and
// calls fn with each batch of entries ("." and ".." left out) until the
// end. It works on the descriptor alone, with getdents64: no os.File, so
// none of the fcntl, dup or poller calls wrapping one costs. buf is reused
// between batches (nil: one of a pool); fn may use it, not keep it. fn's
// error stops the reading and is returned.
func ReadDirents(fd int, buf []byte, fn func([]Dirent) error) error {
	if len(buf) == 0 {
		b := getDirentBuf()
		defer putDirentBuf(b)
		buf = *b
	}
	var batch []Dirent
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		batch = parseDirents(buf[:n], batch[:0])
		if len(batch) == 0 {
			continue
		}
		if err := fn(batch); err != nil {
			return err
		}
	}
}

// parseDirents appends the entries of a getdents64 buffer to out:
// struct linux_dirent64 { u64 ino; s64 off; u16 reclen; u8 type; char name[]; }.
func parseDirents(b []byte, out []Dirent) []Dirent {
	const nameOff = 19
	for len(b) >= nameOff {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < nameOff || reclen > len(b) {
			return out // malformed: the kernel never makes one
		}
		ino := binary.NativeEndian.Uint64(b[0:8])
		typ := b[18]
		name := b[nameOff:reclen]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		b = b[reclen:]
		if ino == 0 || string(name) == "." || string(name) == ".." {
			continue
		}
		out = append(out, Dirent{Name: string(name), Type: typ})
	}
	return out
}
