package manifest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// watchMask is what the directory's watch reports. It is inotify itself
// rather than fsnotify because fsnotify reports a file renamed into the
// directory (IN_MOVED_TO) and a file created there (IN_CREATE) alike, as
// Create; only the first is known to be complete when it appears.
// IN_CLOSE_WRITE is left out: it does not tell that the file is complete
// (see changes).
const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// pathMask is what the watch of a directory on the way to the manifest
// directory reports: names that appear, go or are renamed there, and the
// directory itself going (see follower).
const pathMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// selfMask marks the events that say a watched directory itself is gone,
// moved away or no longer watched.
const selfMask = unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_IGNORED | unix.IN_UNMOUNT

// event is one inotify event.
type event struct {
	wd     int    // the watch it came from; -1 for a queue overflow
	name   string // the entry's name; "" for the directory itself
	mask   uint32
	cookie uint32 // pairs the IN_MOVED_FROM and IN_MOVED_TO of one rename
}

// watcher reads the inotify events of the directories it watches. Its
// goroutine hands them over in batches, one per read(2), and is joined by
// close.
type watcher struct {
	file    *os.File // the inotify instance, non-blocking, in Go's poller
	batches chan []event
	stop    chan struct{}
	done    chan struct{}
	// err is why the reader stopped early; read it once batches is closed.
	err error
}

// newWatcher starts an inotify instance that watches nothing yet.
func newWatcher() (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("create inotify instance: %w", err)
	}
	w := &watcher{
		file:    os.NewFile(uintptr(fd), "inotify"),
		batches: make(chan []event),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go w.read()
	return w, nil
}

// add watches dir for mask, on top of what its watch already reports, and
// returns the watch descriptor: the same for a directory already watched,
// another for a directory removed and created anew, which is another inode.
func (w *watcher) add(dir string, mask uint32) (wd int, err error) {
	err = w.control(func(fd int) (err error) {
		wd, err = unix.InotifyAddWatch(fd, dir, mask|unix.IN_MASK_ADD)
		return err
	})
	if err != nil {
		return -1, fmt.Errorf("add inotify watch of %s: %w", dir, err)
	}
	return wd, nil
}

// remove stops the watch wd. A watch the kernel already dropped (its
// directory was deleted) is no error.
func (w *watcher) remove(wd int) {
	_ = w.control(func(fd int) error {
		_, err := unix.InotifyRmWatch(fd, uint32(wd)) //nolint:gosec // G115: watch descriptors are non-negative
		return err
	})
}

// control runs f on the instance's descriptor through the raw connection:
// File.Fd would put the descriptor back in blocking mode, and close could
// then no longer wake the reader.
func (w *watcher) control(f func(fd int) error) error {
	conn, err := w.file.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := conn.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// close stops the reader and waits for it.
func (w *watcher) close() {
	close(w.stop)
	_ = w.file.Close() // wakes a read blocked in the poller
	<-w.done
}

// read hands over what each read(2) returns until close, or until a read
// fails; it then closes batches.
func (w *watcher) read() {
	defer close(w.done)
	defer close(w.batches)
	// Room for at least one event with the longest name, and many more.
	buf := make([]byte, 64<<10)
	for {
		n, err := w.file.Read(buf)
		if errors.Is(err, os.ErrClosed) {
			return
		}
		if err != nil {
			w.err = fmt.Errorf("read inotify events: %w", err)
			return
		}
		select {
		case w.batches <- parseEvents(buf[:n]):
		case <-w.stop:
			return
		}
	}
}

// parseEvents decodes the events of one read(2): struct inotify_event
// (wd, mask, cookie, len, in host byte order) followed by len bytes of
// NUL-padded name. The kernel never splits an event across reads.
func parseEvents(buf []byte) []event {
	var evs []event
	for len(buf) >= unix.SizeofInotifyEvent {
		end := unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[12:16]))
		if end > len(buf) {
			break
		}
		name := buf[unix.SizeofInotifyEvent:end]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		evs = append(evs, event{
			wd:     int(int32(binary.NativeEndian.Uint32(buf[0:4]))), //nolint:gosec // G115: the kernel's wd is an int32 in the event
			name:   string(name),
			mask:   binary.NativeEndian.Uint32(buf[4:8]),
			cookie: binary.NativeEndian.Uint32(buf[8:12]),
		})
		buf = buf[end:]
	}
	return evs
}
